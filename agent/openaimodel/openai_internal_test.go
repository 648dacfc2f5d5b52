package openaimodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// thinkWhole is the thinkFilter's result for a text pushed in one piece.
func thinkWhole(s string) string {
	f := &thinkFilter{}
	return f.push(s) + f.flush()
}

func TestThinkFilter(t *testing.T) {
	tests := []struct{ in, want string }{
		{"<think>reasoning</think>answer", "answer"},
		{"\n <think>\nr\n</think>\n\n答案 [^1^]", "答案 [^1^]"},
		{"answer <think>not reasoning</think>", "answer <think>not reasoning</think>"},
		{"<thin", "<thin"},                // a prefix of the tag that never completed is text
		{"<think>unclosed reasoning", ""}, // all reasoning
		{"<think></think>", ""},
		{"<b>bold</b>", "<b>bold</b>"},
		{"", ""},
		{"  plain", "  plain"},
		{"<think>a</think>x</think>", "x</think>"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, thinkWhole(tc.in), "%q", tc.in)
		// Any split into two chunks gives the same result.
		for i := 0; i <= len(tc.in); i++ {
			f := &thinkFilter{}
			got := f.push(tc.in[:i]) + f.push(tc.in[i:]) + f.flush()
			assert.Equal(t, tc.want, got, "%q split at %d", tc.in, i)
		}
	}
}

// FuzzThinkFilter checks that the filter's output does not depend on how the stream is chunked.
func FuzzThinkFilter(f *testing.F) {
	f.Add("<think>r</think>answer", uint8(3), uint8(9))
	f.Add(" \n<think>x</think>\n\ny", uint8(1), uint8(14))
	f.Add("<thinking>no</thinking>", uint8(2), uint8(6))
	f.Fuzz(func(t *testing.T, s string, a, b uint8) {
		i, j := min(int(a), len(s)), min(int(b), len(s))
		if i > j {
			i, j = j, i
		}
		tf := &thinkFilter{}
		got := tf.push(s[:i]) + tf.push(s[i:j]) + tf.push(s[j:]) + tf.flush()
		if want := thinkWhole(s); got != want {
			t.Fatalf("split %d/%d of %q: %q, whole: %q", i, j, s, got, want)
		}
	})
}

func TestErrorMessage(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"error":{"message":"Insufficient Balance","type":"unknown_error"}}`, "Insufficient Balance"},
		{`{"error":{"code":"data_inspection_failed","message":""}}`, "data_inspection_failed"},
		{`{"error":"llama runner process has terminated"}`, "llama runner process has terminated"},
		{`{"object":"error","message":"The model does not exist.","code":404}`, "The model does not exist."},
		{`{"code":"InvalidApiKey","message":"Invalid API-key provided.","request_id":"x"}`, "Invalid API-key provided."},
		{`{"detail":"Not Found"}`, "Not Found"},
		{`{"detail":[{"loc":["body","messages"],"msg":"field required","type":"value_error.missing"}]}`, "field required"},
		{`{"msg":"rate limited"}`, "rate limited"},
		{"404 page not found\n", "404 page not found"},
		{"<html><body>502 Bad Gateway</body></html>", ""},
		{`{"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"total_tokens":3}}`, ""},
		{"", ""},
		{"\xff\xfe", ""},
		{`{"error":{"message":`, ""},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, errorMessage([]byte(tc.body)), tc.body)
	}
}

package extractive

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/citegate/citegate/citations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var streamAnswers = []string{
	"根据检索到的资料：\n\n已经开具的电子发票不能直接修改，也不能在原发票上涂改或备注更正。[^1^]\n抬头写错时，唯一正确的做法是：先申请红冲原发票，再按正确抬头重新开具。[^12^]",
	"Based on the retrieved sources:\n\nOpen the password self-service portal at https://password.example.com (reachable from the office network and from the internet).[^1^]\nEnter the 6-digit code;[^1^][^2^]",
	"没有标点的很长一段中文没有标点的很长一段中文没有标点的很长一段中文没有标点的很长一段中文",
	"[^1^]", "[^a^] [^1 [^^] [^1234567890^]", "", "x",
}

// TestChunks: the pieces make up the text; each marker arrives cut in two, its "[^n" in one delta
// and "^]" in the next (so the Stripper must hold a marker back across deltas on every answer); no
// piece is longer than maxChunkRunes outside markers; and an answer takes far fewer deltas than
// runes.
func TestChunks(t *testing.T) {
	for _, text := range streamAnswers {
		var got []string
		for c := range chunks(text) {
			require.NotEmpty(t, c, "empty chunk of %q", text)
			got = append(got, c)
		}
		require.Equal(t, text, strings.Join(got, ""))
		markers := 0
		for i, c := range got {
			if ms := citations.Markers(c); len(ms) > 0 {
				t.Fatalf("chunk %q of %q holds a whole marker", c, text)
			}
			if strings.HasPrefix(c, "[^") && i+1 < len(got) && got[i+1] == "^]" {
				markers++
				continue
			}
			assert.LessOrEqual(t, utf8.RuneCountInString(c), maxChunkRunes, "chunk %q", c)
		}
		assert.Equal(t, len(citations.Markers(text)), markers, "markers of %q cut in two", text)
		// The Stripper sees the same text as Strip, whatever the pieces.
		var s citations.Stripper
		var out strings.Builder
		for _, c := range got {
			out.WriteString(s.Push(c))
		}
		out.WriteString(s.Flush())
		assert.Equal(t, citations.Strip(text), out.String())
	}
	n := 0
	for range chunks(streamAnswers[1]) {
		n++
	}
	assert.Less(t, n, utf8.RuneCountInString(streamAnswers[1])/6, "phrases, not a few runes each")
}

// TestStreamTextCancelled: a cancelled context stops the stream between pieces, and the response
// holds exactly the text handed out.
func TestStreamTextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var sent strings.Builder
	resp, err := streamText(ctx, streamAnswers[0], func(d string) {
		sent.WriteString(d)
		if sent.Len() > 20 {
			cancel()
		}
	})
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	assert.Equal(t, sent.String(), resp.Text)
	assert.True(t, strings.HasPrefix(streamAnswers[0], resp.Text))
	assert.Less(t, len(resp.Text), len(streamAnswers[0]))
}

func FuzzChunks(f *testing.F) {
	for _, s := range streamAnswers {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var b strings.Builder
		for c := range chunks(text) {
			if c == "" {
				t.Fatalf("empty chunk of %q", text)
			}
			b.WriteString(c)
		}
		if b.String() != text {
			t.Fatalf("chunks of %q join to %q", text, b.String())
		}
	})
}

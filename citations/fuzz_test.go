package citations

import (
	"testing"
	"unicode/utf8"
)

// FuzzStripper checks the streaming invariant: for any split of a text, the concatenated Stripper
// output equals Strip(text), and no part ever holds a complete marker.
func FuzzStripper(f *testing.F) {
	for _, s := range []string{"", "A[^1^]B", "[^12^][^", "[[^1^]]", "x[^123456789^]", "发票[^3^]红冲", "[^1234567890^]"} {
		f.Add(s, uint8(1), uint8(3))
	}
	f.Fuzz(func(t *testing.T, text string, a, b uint8) {
		sizes := []int{int(a%16) + 1, int(b%16) + 1}
		got, parts := stripperChunks(text, sizes)
		if want := Strip(text); got != want {
			t.Fatalf("chunked %q with %v: got %q want %q", text, sizes, got, want)
		}
		for _, p := range parts {
			if len(Markers(p)) != 0 {
				t.Fatalf("part %q holds a marker", p)
			}
		}
		if len(Markers(got)) != 0 {
			t.Fatalf("output %q holds a marker", got)
		}
	})
}

// FuzzParsers checks that Extract, Strip, registry building and verification never panic on arbitrary
// text and tool output, and that Strip keeps valid UTF-8 valid.
func FuzzParsers(f *testing.F) {
	f.Add(`{"query":"q","results":[{"title":"t","url":"https://a.example/","content":"c"}],"total_results":1}`, "A[^1^]")
	f.Add(`{"url":"https://p.example/","title":"p","content":"x","truncated":true}`, "[^0^][^2^]")
	f.Add(`{"error":"x"}`, "[^99999999999999999999^]")
	f.Add("\xff\xfe", "[^1^")
	f.Fuzz(func(t *testing.T, toolOutput, answer string) {
		Extract(answer)
		s := Strip(answer)
		if utf8.ValidString(answer) && !utf8.ValidString(s) {
			t.Fatalf("Strip broke UTF-8: %q", answer)
		}
		var r Registry
		r.Add(ToolResult{Tool: ToolWebSearch, Content: toolOutput})
		r.Add(ToolResult{Tool: ToolOpenWebPage, Content: toolOutput})
		v := Verify(answer, &r)
		for _, c := range v.Citations {
			if _, ok := NormalizeURL(c.URL); !ok {
				t.Fatalf("unverified URL %q in citations", c.URL)
			}
		}
		FromMetadata([]byte(toolOutput))
	})
}

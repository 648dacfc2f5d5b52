package citations

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
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

// fuzzAllow is the allow-list of FuzzLinkFilter: what a run could have seen.
var fuzzAllow = AllowList([]string{"https://ok.example/a", "http://ok.example/", "https://www.ok.example"})

// FuzzLinkFilter checks the link rule's two promises for arbitrary text: streaming equals the whole
// text for any split (the held-back tail never changes a decision), and no unverified URL survives
// outside code, by a host check independent of the filter's URL grammar. (A second pass of the
// filter may still unwrap a relative "link" whose destination is the notice itself, as in
// "[0](<a:b>0)" → "[0](〔…〕0)"; that names no host, and the renderer never links a relative URL.)
func FuzzLinkFilter(f *testing.F) {
	for _, s := range []string{
		"", "见 https://evil.example/x。", "[官网](https://evil.example)", "![a](https://evil.example/i.png)",
		"<https://evil.example>", "www.evil.example", "`https://evil.example`", "```\nhttps://evil.example\n```\n",
		"http[s](x)://evil.example", "ww[w](x).evil.example", "[http](x)s://evil.example", "ht[](x)tp://evil.example",
		"[t](https://ok.example/a \"https://evil.example\")", "    https://evil.example", "- a\n\n    https://evil.example",
		"` a\n\nhttps://evil.example `", "[a](<https://evil.example> 'b')", "https://ok.example/a[^1^]",
	} {
		f.Add(s, uint8(1), uint8(7))
	}
	f.Fuzz(func(t *testing.T, text string, a, b uint8) {
		want, hidden, shown := FilterLinks(text, fuzzAllow)
		sizes := []int{int(a%16) + 1, int(b%16) + 1}
		lf := NewLinkFilter(fuzzAllow)
		var got strings.Builder
		for i, k := 0, 0; i < len(text); k++ {
			n := min(sizes[k%2], len(text)-i)
			got.WriteString(lf.Push(text[i : i+n]))
			i += n
		}
		got.WriteString(lf.Flush())
		if got.String() != want || lf.Hidden() != hidden {
			t.Fatalf("chunked %q with %v: got %q (%d hidden) want %q (%d hidden)", text, sizes, got.String(), lf.Hidden(), want, hidden)
		}
		for _, u := range shown {
			if !fuzzAllow(u) {
				t.Fatalf("shown %q is not allowed", u)
			}
		}
		assertHostsAllowed(t, want)
	})
}

// wwwHostRE is a "www." host a linkifier would link: a dot-separated name ending in a letter TLD.
var wwwHostRE = regexp.MustCompile(`^www\.[^.]+(\.[^.]+)*\.[a-z][a-z0-9-]*$`)

// assertHostsAllowed fails when an http(s) URL outside code in out names a host no allowed URL has.
func assertHostsAllowed(t *testing.T, out string) {
	t.Helper()
	code := CodeSpans(out)
	inCode := func(i int) bool {
		for _, c := range code {
			if c.Start <= i && i < c.End {
				return true
			}
		}
		return false
	}
	lower := strings.ToLower(out)
	for i := 0; i < len(lower); i++ {
		var h int
		switch {
		case strings.HasPrefix(lower[i:], "https://"):
			h = i + 8
		case strings.HasPrefix(lower[i:], "http://"):
			h = i + 7
		default:
			continue
		}
		// The host as a browser would read it: letters and digits of any script, dots, hyphens.
		e := h
		for e < len(lower) {
			r, size := utf8.DecodeRuneInString(lower[e:])
			if r != '.' && r != '-' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				break
			}
			e += size
		}
		host := strings.TrimRight(lower[h:e], ".-")
		if host == "" || inCode(i) {
			continue
		}
		if host != "ok.example" && host != "www.ok.example" {
			t.Fatalf("output %q shows host %q at %d", out, host, i)
		}
	}
	for i := strings.Index(lower, "www."); i >= 0; {
		e := i + 4
		for e < len(lower) && (lower[e] == '.' || lower[e] == '-' || isASCIILetter(lower[e]) || isDigit(lower[e])) {
			e++
		}
		host := "www." + strings.TrimRight(lower[i+4:e], ".")
		if (i == 0 || wwwBoundary(lower[i-1])) && wwwHostRE.MatchString(host) && !inCode(i) && host != "www.ok.example" {
			t.Fatalf("output %q shows host %q at %d", out, host, i)
		}
		k := strings.Index(lower[i+1:], "www.")
		if k < 0 {
			break
		}
		i += 1 + k
	}
}

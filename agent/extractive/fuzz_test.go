package extractive

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseQuestion checks that any question yields between one and maxQuestionParts parts, each
// with a search query, and that composing an answer over a passage never panics.
func FuzzParseQuestion(f *testing.F) {
	for _, s := range []string{"那差旅报销需要哪些材料？多久能到账？", "报销和发票有哪些规定？请列出要点", "How long does a VPN session last, and how many devices can connect at once?", "？？，，", "list"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || strings.TrimSpace(s) == "" {
			return
		}
		q := parseQuestion(s)
		if len(q.parts) < 1 || len(q.parts) > maxQuestionParts {
			t.Fatalf("parseQuestion(%q): %d parts", s, len(q.parts))
		}
		for _, p := range q.parts {
			if strings.TrimSpace(p.query) == "" {
				t.Fatalf("parseQuestion(%q): empty query in %+v", s, p)
			}
		}
		_ = compose(s, q.zh, []passage{{ref: 1, title: "T", content: "## 标题\n1. 第一步。\n- 要点一；要点二\n| a | b |\n| --- | --- |\n| 1 | 2 |"}}, nil)
	})
}

// FuzzNumberedItem: isNumberedItem answers as the regular expression it replaced.
func FuzzNumberedItem(f *testing.F) {
	for _, s := range []string{"1. a", "12) b", "123、c", "1234. d", "1.", "a1.", "", "1", "١. x", "01、"} {
		f.Add(s)
	}
	re := regexp.MustCompile(`^\d{1,3}[.)、] ?`)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isNumberedItem(s), re.MatchString(s); got != want {
			t.Fatalf("isNumberedItem(%q) = %v, want %v", s, got, want)
		}
	})
}

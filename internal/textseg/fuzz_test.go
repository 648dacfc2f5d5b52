package textseg

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSegment checks, for any text, that the sentences put back together give the text, that no
// term is empty or a stop word, and that the lexicon blanks phrases without changing the length.
func FuzzSegment(f *testing.F) {
	for _, s := range []string{"年假有多少天？没休完的年假可以顺延吗？", "How do I connect to the VPN?", "a.b. c", "密码忘了怎么办", "locked\xff锁了"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		if got := strings.Join(Sentences(s), ""); got != s {
			t.Fatalf("Sentences(%q) joined = %q", s, got)
		}
		for term := range Terms(s) {
			if term == "" || latinStopwords[term] {
				t.Fatalf("Terms(%q) has %q", s, term)
			}
		}
		_, rest := Domain.Match(s)
		if len(rest) != len(strings.ToLower(s)) {
			t.Fatalf("Match(%q) rest %q changed length", s, rest)
		}
	})
}

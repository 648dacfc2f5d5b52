package tools

import (
	"strings"
	"testing"
)

var cleanSeeds = []string{
	"", "a", "a b", "a  b", " a", "a ", "a\nb", "a\n\nb", "a\n\n\nb", "a \nb", "a\n b", "\na", "a\n",
	"a\tb", "a\rb", "a\u3000b", "a\u00a0b", "a\u2028b", "a\u0085b", "\xffa", "a\vb", "员工 出差\n\n住宿标准：600 元。",
	"Open the portal at https://password.example.com (reachable).", "a\ufffdb",
}

func TestIsClean(t *testing.T) {
	for _, s := range cleanSeeds {
		if isClean(s) && cleanTextSteps(s) != s {
			t.Errorf("isClean(%q) but cleanText gives %q", s, cleanTextSteps(s))
		}
	}
	for _, s := range []string{"a b", "员工 出差\n\n住宿标准：600 元。", ""} {
		if !isClean(s) {
			t.Errorf("isClean(%q) = false: clean text takes the slow path", s)
		}
	}
}

// FuzzCleanText: whatever isClean accepts, cleanText's steps leave as it is, so the fast path
// changes no result.
func FuzzCleanText(f *testing.F) {
	for _, s := range cleanSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if isClean(s) && cleanTextSteps(s) != s {
			t.Fatalf("isClean(%q) but cleanText gives %q", s, cleanTextSteps(s))
		}
		// Text cleaned once is clean unless it keeps white space the steps leave inside a line.
		if c := cleanText(s); !isClean(c) && !strings.ContainsAny(c, "\v\f\u0085\u2028\u2029") {
			t.Fatalf("cleanText(%q) = %q is not clean", s, c)
		}
	})
}

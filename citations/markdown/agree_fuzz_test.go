package markdown

import (
	"slices"
	"testing"

	"github.com/citegate/citegate/citations"
)

// FuzzCodeAgreement compares, for arbitrary answers, the markers the renderer turns into
// superscripts with the markers citations.Verify counts (MarkersOutsideCode). Known divergences,
// all in shapes models do not write: an empty list item followed by a blank line and an indented
// line, HTML blocks (goldmark shows them as text, markers stripped). Where they diverge, the page
// still lists only citations with a superscript (TestSourcesOnlyWithSuperscript).
func FuzzCodeAgreement(f *testing.F) {
	for _, c := range []string{
		"a[^1^] `[^2^]`", "```\n[^1^]\n```", "- a\n\n    [^1^]", "> `a\n> [^1^]`", "重要![^1^]", "*     [^1^]",
		"1. a\n\n       [^2^]", "<https://a.example/`[^1^]>` [^2^]", "`a\n# b [^1^]` [^2^]",
	} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, c string) {
		got := superscripts(Render(c, nineCitations(), Options{}))
		var want []int
		for _, m := range citations.MarkersOutsideCode(c) {
			if m.N >= 1 && m.N <= 9 {
				want = append(want, m.N)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q: renderer %v, Verify %v", c, got, want)
		}
	})
}

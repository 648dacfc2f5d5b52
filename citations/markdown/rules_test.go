package markdown

import (
	"html"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/citegate/citegate/citations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nineCitations cites every number 1..9, so every marker outside code becomes a superscript.
func nineCitations() []citations.Citation {
	var cits []citations.Citation
	for n := 1; n <= 9; n++ {
		cits = append(cits, cite(n, "https://s"+strconv.Itoa(n)+".example/", "S"))
	}
	return cits
}

// superscripts returns the registry numbers of the superscripts in rendered HTML, in order.
func superscripts(out string) []int {
	var ns []int
	for _, m := range supRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[3])
		ns = append(ns, n)
	}
	return ns
}

// TestVerifyAgreesWithRenderer is the code rule's golden table: for each answer, the markers the
// renderer (goldmark, which never parses markers inside code) turns into superscripts are exactly
// the markers citations.Verify counts.
func TestVerifyAgreesWithRenderer(t *testing.T) {
	cases := []string{
		"a[^1^] `[^2^]` b[^3^]",
		"``[^1^]`` and `` ` [^2^] ` `` then [^3^]",
		"unmatched ` backtick [^1^]",
		"unmatched `` run ` [^1^] `",
		"\\`[^1^]` escaped opener [^2^]",
		"`code spans\ncross lines [^1^]` [^2^]",
		"`a\n\n[^1^] paragraph ended the span`",
		"```\n[^1^]\n```\n[^2^]",
		"```go title\n[^1^]\n```\n",
		"~~~\n[^1^]\n~~~\n[^2^]",
		"````\n```\n[^1^]\n````\n[^2^]",
		"```\nunclosed [^1^]\n",
		"``` a`b [^1^]\n[^2^]",
		"~~~ a`b\n[^1^]\n~~~",
		"para\n\n    indented [^1^]\n\n[^2^]",
		"para\n    continuation [^1^]",
		"\tindented with a tab [^1^]",
		"- item [^1^]\n\n  ```\n  [^2^]\n  ```\n- next [^3^]",
		"- item\n\n    item paragraph [^1^]",
		"> quote `[^1^]` [^2^]\n> ```\n> [^3^]\n> ```\n",
		"> ```\n> [^1^]\n\noutside [^2^]",
		"# heading `[^1^]` [^2^]",
		"| a | b |\n|---|---|\n| `[^1^]` | [^2^] |",
		"[link `[^1^]` text [^2^]](https://x.example/)",
		"text `x\n# heading [^1^]` [^2^]",
		"`a\n- item [^1^]`",
		"`a\n===\n[^1^]`",
		"<https://a.example/`[^1^]>` [^2^]",
		"[^1^]``[^2^]``[^3^]",
		"*emphasis `[^1^]`* **[^2^]**",
		"1. one\n2. two `[^1^]`\n\n       [^2^] indented in item",
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			got := superscripts(Render(c, nineCitations(), Options{}))
			var want []int
			for _, m := range citations.MarkersOutsideCode(c) {
				want = append(want, m.N)
			}
			assert.Equal(t, want, got, "superscripts vs markers Verify keeps in %q", c)
		})
	}
}

// TestSourcesOnlyWithSuperscript: a citation whose markers are all inside code (a record written
// before the code rule) is not listed, and display numbers stay 1..k.
func TestSourcesOnlyWithSuperscript(t *testing.T) {
	cits := []citations.Citation{cite(1, "https://a.example/", "A"), cite(2, "https://b.example/", "B"), cite(3, "https://c.example/", "C")}
	r := RenderAnswer("x `[^1^]` y[^3^]", cits, Options{})
	assert.Equal(t, []int{3}, superscripts(r.HTML))
	require.Len(t, r.Cited, 1)
	assert.Equal(t, 3, r.Cited[0].N)
	assert.Contains(t, r.HTML, `data-k="1">1</a></sup>`)
	assert.Contains(t, r.HTML, "<summary>来源 1</summary>")
	assert.NotContains(t, r.HTML, "a.example")
}

func TestRenderLinkRule(t *testing.T) {
	allow := citations.AllowList([]string{"https://ok.example/a", "https://ok.example/i.png"})
	cits := []citations.Citation{cite(1, "https://src.example/doc", "Doc")}
	tests := []struct {
		name, in string
		hidden   int
		contains []string
		absent   []string
	}{
		{"unverified link keeps text", "[官网](https://evil.example.com)", 1, []string{"<p>官网</p>"}, []string{"evil"}},
		{"verified link kept", "[ok](https://ok.example/a)", 0, []string{`<a href="https://ok.example/a"`}, nil},
		{"citation url allowed", "see https://src.example/doc。", 0, []string{`<a href="https://src.example/doc"`, "</a>。"}, nil},
		{"bare url hidden", "see https://evil.example/x。", 1, []string{"see " + citations.HiddenLinkNotice + "。"}, []string{"evil"}},
		{"www hidden", "see www.evil.example now", 1, []string{citations.HiddenLinkNotice}, []string{"evil"}},
		{"autolink hidden", "<https://evil.example/>", 1, []string{citations.HiddenLinkNotice}, []string{"evil"}},
		{"image becomes alt", "![图](https://evil.example/i.png)", 1, []string{"<p>图</p>"}, []string{"<img", "evil"}},
		{"verified image", "![图](https://ok.example/i.png)", 0, []string{`<img src="https://ok.example/i.png" alt="图">`}, nil},
		{"reference link", "[t][r]\n\n[r]: https://evil.example/ref", 1, []string{"<p>t</p>"}, []string{"evil"}},
		{"relative link", "[admin](/admin)", 1, []string{"<p>admin</p>"}, []string{"href=\"/admin\""}},
		{"url in code stays", "`https://evil.example/` x", 0, []string{"<code>https://evil.example/</code>"}, nil},
		{"entity url hidden", "https&#58;//evil.example/x", 1, []string{citations.HiddenLinkNotice}, []string{"evil"}},
		{"joined by unwrapping", "http[s](https://evil.example/)://evil.example/j", 2, []string{citations.HiddenLinkNotice}, []string{"evil"}},
		{"marker after url", "https://ok.example/a[^1^]", 0, []string{`<a href="https://ok.example/a"`, `data-n="1"`}, nil},
		{"url text of verified link", "[https://evil.example/](https://ok.example/a)", 1, []string{`<a href="https://ok.example/a" rel="noreferrer noopener" target="_blank">` + citations.HiddenLinkNotice + `</a>`}, []string{"evil"}},
		// bluemonday drops an alt text with a URL (its pattern for alt admits no "〔").
		{"alt attribute", "![see https://evil.example/](https://ok.example/i.png)", 0, []string{`<img src="https://ok.example/i.png">`}, []string{"evil"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := RenderAnswer(tc.in, cits, Options{AllowLink: allow})
			assertSafe(t, r.HTML)
			assert.Equal(t, tc.hidden, r.Hidden, r.HTML)
			for _, s := range tc.contains {
				assert.Contains(t, r.HTML, s)
			}
			for _, s := range tc.absent {
				assert.NotContains(t, r.HTML, s)
			}
		})
	}
	// Without AllowLink only the citations' own URLs are links.
	r := RenderAnswer("[ok](https://ok.example/a) [doc](https://src.example/doc)", cits, Options{})
	assert.Equal(t, 1, r.Hidden)
	assert.NotContains(t, r.HTML, "ok.example")
	assert.Contains(t, r.HTML, `<a href="https://src.example/doc"`)
}

// TestEmphasisBudget: the pathological answer of issue 7 renders without emphasis parsing (its
// delimiters shown as text) and its citations still work; an ordinary answer keeps emphasis.
func TestEmphasisBudget(t *testing.T) {
	assert.True(t, overEmphasisBudget(pathological))
	assert.False(t, overEmphasisBudget(normalAnswer()))
	cits := []citations.Citation{cite(1, "https://a.example/", "A")}
	r := RenderAnswer(pathological[:len(pathological)/2]+"[^1^] https://evil.example/ "+pathological[len(pathological)/2:], cits, Options{})
	assert.True(t, r.Degraded)
	assert.Equal(t, []int{1}, superscripts(r.HTML))
	assert.Equal(t, 1, r.Hidden)
	assert.Contains(t, r.HTML, "_a**_a**")
	assert.NotContains(t, r.HTML, "<em>")
	assertSafe(t, r.HTML)
	n := RenderAnswer(normalAnswer(), cits, Options{})
	assert.False(t, n.Degraded)
	assert.Contains(t, n.HTML, "<strong>先确认</strong>")
	// Many bold phrases spread over paragraphs stay within the budget.
	many := strings.Repeat("这是**重点**，那是*强调*。\n\n", 2000)
	assert.False(t, overEmphasisBudget(many))
	// One paragraph with thousands of delimiters does not.
	assert.True(t, overEmphasisBudget(strings.Repeat("**a** ", 2000)))
}

var hrefRE = regexp.MustCompile(`(?:href|src)="([^"]*)"`)

// assertOnlyAllowedURLs fails when out links or shows an http(s) URL outside code that neither
// allow nor the citations admit.
func assertOnlyAllowedURLs(t *testing.T, out string, allow func(string) bool, cits []citations.Citation) {
	t.Helper()
	// bluemonday writes hrefs re-serialised by net/url; compare in that form.
	canon := func(u string) string {
		if p, err := url.Parse(u); err == nil {
			return p.String()
		}
		return u
	}
	own := []string{}
	for _, c := range usable(cits) {
		own = append(own, canon(c.URL))
	}
	for _, m := range hrefRE.FindAllStringSubmatch(out, -1) {
		u := html.UnescapeString(m[1])
		if strings.HasPrefix(u, "#") || allow(u) || slices.Contains(own, canon(u)) {
			continue
		}
		t.Fatalf("output links %q: %s", u, out)
	}
	if _, n := hideTextURLs(out, allowFunc(cits, allow)); n != 0 {
		t.Fatalf("output shows %d unverified URLs as text: %s", n, out)
	}
}

// TestPlainFallback: inputs goldmark parses in more than linear time (thousands of brackets, deep
// nesting) render as text with superscripts, the link rule and sanitising intact.
func TestPlainFallback(t *testing.T) {
	cits := []citations.Citation{cite(1, "https://a.example/", "A"), cite(2, "https://b.example/", "B")}
	for name, content := range map[string]string{
		"brackets": strings.Repeat("[a](", 2000) + "结论[^1^] `[^2^]` https://evil.example/x <b>",
		"nesting":  strings.Repeat("> ", 40) + "结论[^1^] `[^2^]` https://evil.example/x <b>",
		"lists":    strings.Repeat("1. ", 40) + "结论[^1^] `[^2^]` https://evil.example/x <b>",
	} {
		t.Run(name, func(t *testing.T) {
			r := RenderAnswer(content, cits, Options{Anchor: "p"})
			assert.True(t, r.Degraded)
			assertSafe(t, r.HTML)
			assert.Equal(t, []int{1}, superscripts(r.HTML))
			require.Len(t, r.Cited, 1)
			assert.Equal(t, 1, r.Hidden)
			assert.NotContains(t, r.HTML, "evil")
			assert.Contains(t, r.HTML, "&lt;b&gt;")
			assert.Contains(t, r.HTML, `<li id="p-src-1"`)
		})
	}
	assert.False(t, needsPlain(normalAnswer()))
	assert.False(t, needsPlain(strings.Repeat("引用[^1^][^2^] [链接](https://a.example/) ", 700)))
	assert.Equal(t, 3, containerDepth("> - 1. text"))
	assert.Equal(t, 0, containerDepth("-1 text"))
}

package markdown

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
)

// spliceInputs are answers whose superscripts sit in every place goldmark can put them: text,
// emphasis, headings, lists, tables, block quotes, beside links they were moved out of, after
// an unwrapped link, next to code, and beside the sanitiser's own rewrites (external links, text
// it escapes differently).
var spliceInputs = []string{
	"答案[^1^]。",
	"# 标题[^1^]\n\n**粗体[^2^]** _斜体[^1^]_ ~~删除[^2^]~~\n",
	"- 一[^1^]\n- 二[^2^]\n  - 三[^1^][^2^]\n\n1. a[^2^]\n",
	"| a | b |\n|---|---|\n| x[^1^] | y[^2^] |\n",
	"> 引用[^1^]\n> 第二行[^2^]\n",
	"[官网[^1^]](https://one.example/a)[^2^] 与 [evil](https://evil.example/x)[^1^] https://evil.example/bare[^2^]",
	"![图[^1^]](https://one.example/i.png) <https://two.example/[^1^]> www.two.example/p[^2^]",
	"`code [^1^]` [^2^]\n\n```go\nx := 1 // [^1^]\n```\n[^1^]",
	"\"quotes\" & 'apostrophes' < > [^1^]\n[^2^]开头\n\n行尾[^1^]\n下一行",
	"<b>raw[^1^]</b> <script>alert(1)</script>[^2^]\n\n<div>\nblock [^1^]\n</div>\n",
	"- [ ] task[^1^]\n- [x] done[^2^]\n",
	"a[^1^]b[^1^]c[^2^]d[^9^]e[^0^]\n",
}

func spliceCitations() []citations.Citation {
	at := time.Date(2026, 12, 1, 11, 23, 8, 0, time.UTC)
	return []citations.Citation{
		{N: 1, URL: "https://one.example/a", Title: "One", RetrievedAt: &at, Lead: "第一行\n第二行"},
		{N: 2, URL: "https://two.example/b?q=1&r=<2>", Title: "Two & \"two\""},
	}
}

// TestSpliceMatchesSanitiser: splicing the superscripts in after sanitising gives the HTML that
// sanitising them with the rest gives, byte for byte, on the golden files' answers and on answers
// with superscripts everywhere goldmark puts them; and the splice really happened.
func TestSpliceMatchesSanitiser(t *testing.T) {
	inputs := append([]string(nil), spliceInputs...)
	files, err := filepath.Glob(filepath.Join("testdata", "*.md"))
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		inputs = append(inputs, string(b))
	}
	cits := spliceCitations()
	allow := citations.AllowList([]string{"https://one.example/a", "https://two.example/b?q=1&r=<2>"})
	spliced := 0
	// A clock that stands still: highlighting stops at a deadline, which a loaded machine would
	// reach in one rendering and not the other.
	still := func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }
	for _, in := range inputs {
		for _, opt := range []Options{{Anchor: "m4", MessageID: 4, AllowLink: allow, Now: still}, {Lang: "en", Now: still}, {Anchor: "x_1-y", PlainCode: true}} {
			fast, st := renderBodyState(in, cits, opt, true)
			slow, _ := renderBodyState(in, cits, opt, false)
			require.Equal(t, slow, fast, "%q", in)
			spliced += len(st.sups)
			assert.NotContains(t, fast.HTML, supPlaceholder, "%q", in)
		}
	}
	assert.Greater(t, spliced, 50, "superscripts went through the splice")
}

// TestSupPassesSanitiser: every superscript the renderer can write, at the bounds of its inputs,
// comes out of the sanitiser unchanged, which is what lets it skip the sanitiser.
func TestSupPassesSanitiser(t *testing.T) {
	max := 999_999_999 // citations.MaxDigits digits
	require.Equal(t, 9, citations.MaxDigits)
	for _, anchor := range []string{"cite", "m1", "m18446744073709551615", "A" + strings.Repeat("z_-9", 15) + "abc", "x-"} {
		require.Equal(t, anchor, Options{Anchor: anchor}.anchor(), "a valid anchor")
		for _, n := range [][3]int{{1, 1, 1}, {max, max, max}, {7, 3, 12}} {
			sup := supHTML(anchor, n[0], n[1], n[2])
			assert.Equal(t, sup, policy.Sanitize(sup))
			// In context: inside emphasis, a list item, a table cell, after a link.
			for _, ctx := range []string{"<p>a%sb</p>", "<ul><li><em>x%s</em></li></ul>", "<table><tbody><tr><td>%s</td></tr></tbody></table>", `<p><a href="https://a.example/">l</a>%s</p>`} {
				in := strings.Replace(ctx, "%s", sup, 1)
				assert.Equal(t, policy.Sanitize(strings.Replace(ctx, "%s", supPlaceholder, 1)), strings.Replace(policy.Sanitize(in), sup, supPlaceholder, 1))
			}
		}
	}
}

func FuzzSpliceMatchesSanitiser(f *testing.F) {
	for _, in := range spliceInputs {
		f.Add(in, "t", "https://a.example/")
	}
	f.Add("[^1^]`[^1^]`<script>", "<img src=x onerror=alert(1)>", "javascript:alert(1)")
	f.Add("[x [^1^]](https://a/[^1^])", "", "https://www.a.example/p")
	f.Add("a\n[^1^]b\n[^2^]", "t", "https://a.example/")
	allow := citations.AllowList([]string{"https://ok.example/a"})
	f.Fuzz(func(t *testing.T, content, title, u string) {
		cits := []citations.Citation{cite(1, u, title), cite(2, "https://b.example/", title)}
		opt := Options{Anchor: "f", MessageID: 1, AllowLink: allow, Now: func() time.Time { return time.Unix(0, 0) }}
		fast, _ := renderBodyState(content, cits, opt, true)
		slow, _ := renderBodyState(content, cits, opt, false)
		if fast.HTML != slow.HTML || fast.Hidden != slow.Hidden || len(fast.Cited) != len(slow.Cited) {
			t.Fatalf("%q: spliced %q, sanitised %q", content, fast.HTML, slow.HTML)
		}
	})
}

// TestSourcesMatchSanitiser: a sources section that skips the sanitiser is exactly what the
// sanitiser makes of it, and typical citations do skip it; the inputs it would rewrite do not.
func TestSourcesMatchSanitiser(t *testing.T) {
	at := time.Date(2026, 12, 1, 11, 23, 8, 0, time.UTC)
	typical := []citations.Citation{
		{N: 1, URL: "http://127.0.0.1:18471/kb/einvoice-title-correction", Title: "电子发票抬头开错了怎么办", RetrievedAt: &at, Lead: "公司正确的开票信息\n抬头必须一致。\n操作步骤…"},
		{N: 3, URL: "https://www.chinatax.gov.cn/red-invoice?id=7&x=<y>", Title: `A "quoted" & 'single' <title>`, Lead: "a & b"},
		{N: 12, URL: "https://example.com/%E4%B8%AD%E6%96%87/path", Title: ""},
		{N: 5, URL: "https://example.com/a#frag", Title: strings.Repeat("长", 100)},
	}
	site := func(u string) string {
		if strings.Contains(u, "/kb/") {
			return "电子发票抬头开错了怎么办"
		}
		return ""
	}
	for _, opt := range []Options{{Anchor: "m4", MessageID: 4, SiteName: site}, {Lang: "en"}, {Anchor: "m1", MessageID: 1}} {
		html, unchanged := sourcesHTML(usable(typical), opt)
		require.True(t, unchanged, "typical citations skip the sanitiser")
		assert.Equal(t, policy.Sanitize(html), html)
		assert.Equal(t, html, RenderSources(typical, opt))
	}
	later := time.Date(12026, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, c := range map[string]citations.Citation{
		"url read back otherwise": {N: 1, URL: "HTTPS://Example.com/a", Title: "t"},
		"NUL":                     {N: 1, URL: "https://example.com/", Title: "a\x00b"},
		"invalid UTF-8":           {N: 1, URL: "https://example.com/", Title: "a\xffb"},
		"five-digit year":         {N: 1, URL: "https://example.com/", Title: "t", RetrievedAt: &later},
		"CR in the path":          {N: 1, URL: "https://example.com/a%0Db", Title: ""},
	} {
		cits := []citations.Citation{c}
		html, unchanged := sourcesHTML(usable(cits), Options{MessageID: 1})
		assert.False(t, unchanged, name)
		assert.Equal(t, policy.Sanitize(html), RenderSources(cits, Options{MessageID: 1}), name)
	}
	// Titles and leads lose their carriage returns on the way (white space is folded); text that
	// still had one would take the sanitiser, which turns it into a line feed.
	assert.False(t, textPassesUnchanged("a\rb"))
	assert.NotEqual(t, "<p>a\rb</p>", policy.Sanitize("<p>a\rb</p>"))
}

func FuzzSourcesMatchSanitiser(f *testing.F) {
	f.Add("https://example.com/a?b=c&d=<e>", "title & \"q\"", "lead\nline", "site", int64(1764588188), 3)
	f.Add("HTTP://EXAMPLE.com/%zz", "a\rb", "\x00", "", int64(-99999999999), 1)
	f.Add("https://例子.测试/路径", "t", "", "<b>", int64(0), 1000000000)
	f.Fuzz(func(t *testing.T, u, title, lead, site string, at int64, n int) {
		ts := time.Unix(at, 0)
		cits := []citations.Citation{{N: n, URL: u, Title: title, Lead: lead, RetrievedAt: &ts}, {N: n + 1, URL: "https://b.example/", Title: title}}
		opt := Options{Anchor: "f", MessageID: 9, SiteName: func(string) string { return site }}
		html, unchanged := sourcesHTML(usable(cits), opt)
		if unchanged && policy.Sanitize(html) != html {
			t.Fatalf("sanitiser changed %q into %q", html, policy.Sanitize(html))
		}
	})
}

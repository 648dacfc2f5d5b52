package markdown

import (
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/citegate/citegate/citations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPolicyKeepsListStartAndCodeClasses checks the sanitiser rules for ordered-list starts, the
// code language class and chroma's classes one by one: what is kept and, as narrowly, what is not.
func TestPolicyKeepsListStartAndCodeClasses(t *testing.T) {
	cases := []struct{ in, want string }{
		{`<ol start="3"><li>x</li></ol>`, `<ol start="3"><li>x</li></ol>`},
		{`<ol start="0"><li>x</li></ol>`, `<ol start="0"><li>x</li></ol>`},
		{`<ol start="-1"><li>x</li></ol>`, `<ol><li>x</li></ol>`},
		{`<ol start="3x"><li>x</li></ol>`, `<ol><li>x</li></ol>`},
		{`<ol start="1234567890"><li>x</li></ol>`, `<ol><li>x</li></ol>`},
		{`<ul start="3"><li>x</li></ul>`, `<ul><li>x</li></ul>`},
		{`<pre><code class="language-go">x</code></pre>`, `<pre><code class="language-go">x</code></pre>`},
		{`<pre><code class="language-c++">x</code></pre>`, `<pre><code class="language-c++">x</code></pre>`},
		{`<pre><code class="language-go evil">x</code></pre>`, `<pre><code>x</code></pre>`},
		{`<pre><code class="lang-go">x</code></pre>`, `<pre><code>x</code></pre>`},
		{`<p class="language-go">x</p>`, `<p>x</p>`},
		{`<pre class="chroma"><code><span class="kd">func</span></code></pre>`, `<pre class="chroma"><code><span class="kd">func</span></code></pre>`},
		{`<pre class="chroma evil"><code>x</code></pre>`, `<pre><code>x</code></pre>`},
		{`<span class="evil">x</span>`, `<span>x</span>`},
		{`<span class="k nf">x</span>`, `<span>x</span>`},
		{`<p class="k">x</p>`, `<p>x</p>`},
		{`<span style="color:red" class="k">x</span>`, `<span class="k">x</span>`},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, policy.Sanitize(c.in), "input %s", c.in)
	}
}

var tagRE = regexp.MustCompile(`<[^>]*>`)

// stopped is a clock that never moves: highlighting never runs out of time, so the tests'
// verdicts do not depend on how busy the machine is.
func stopped() time.Time { return time.Unix(1_700_000_000, 0) }

// TestHighlightDeadline: once highlighting has used highlightTime, the block being highlighted and
// every later one are plain; the text is the same either way.
func TestHighlightDeadline(t *testing.T) {
	at := stopped()
	// Every look at the clock costs 1 ms: the one-line block takes a few dozen, the long one
	// hundreds, past highlightTime.
	clock := func() time.Time {
		at = at.Add(time.Millisecond)
		return at
	}
	short := "```go\nx := 1\n```\n\n"
	long := "```go\n" + strings.Repeat("x := compute(a, b) // step\n", 40) + "```\n\n"
	content := short + long + short
	out := Render(content, nil, Options{Anchor: "m1", Now: clock})
	assert.Equal(t, 1, strings.Count(out, `<pre class="chroma">`), "the first block fits in the time")
	assert.Equal(t, 2, strings.Count(out, `<pre><code class="language-go">`), "the one that ran out and the one after are plain")
	assert.True(t, strings.HasPrefix(out, `<pre class="chroma">`))
	plain := Render(content, nil, Options{Anchor: "m1", PlainCode: true})
	assert.Equal(t, html.UnescapeString(tagRE.ReplaceAllString(plain, "")), html.UnescapeString(tagRE.ReplaceAllString(out, "")))
}

// codeText is the text of the first <pre> block of out.
func codeText(t *testing.T, out string) string {
	t.Helper()
	start := strings.Index(out, "<pre")
	end := strings.Index(out, "</pre>")
	require.True(t, start >= 0 && end > start, "no <pre> in %s", out)
	return html.UnescapeString(tagRE.ReplaceAllString(out[start:end], ""))
}

// TestHighlightKeepsText renders the same code in several languages and checks that the
// highlighted HTML (spans only, classes only) holds exactly the code's text.
func TestHighlightKeepsText(t *testing.T) {
	code := map[string]string{
		"go":         "package main\n\nfunc main() { println(\"<b>&amp;</b> [^1^]\") }\n",
		"python":     "def f(x):\n    return x ** 2  # [^2^] <i>\n",
		"javascript": "const a = `${b}</script>`; // https://evil.example/x\n",
		"sql":        "SELECT * FROM t WHERE a = '<' AND b > 1;\n",
		"json":       "{\"a\": [1, 2, \"<x>\"]}\n",
		"bash":       "curl -s https://a.example/ | jq '.x' > out.txt\n",
		"html":       "<div onclick=\"evil()\"><script>alert(1)</script></div>\n",
	}
	for lang, src := range code {
		out := Render("```"+lang+"\n"+src+"```\n", nil, Options{Anchor: "m1", Now: stopped})
		assert.Contains(t, out, `<pre class="chroma"><code class="language-`+lang+`">`, lang)
		assert.Contains(t, out, `<span class="`, lang)
		assert.NotContains(t, out, "style=", lang)
		assert.NotContains(t, out, "<script", lang)
		assert.NotContains(t, out, "<div", lang)
		assert.Equal(t, src, codeText(t, out), lang)
		plain := Render("```"+lang+"\n"+src+"```\n", nil, Options{Anchor: "m1", PlainCode: true})
		assert.Equal(t, "<pre><code class=\"language-"+lang+"\">"+html.EscapeString(src)+"</code></pre>\n", plain, lang)
	}
}

// TestHighlightBudgets: a block over maxHighlightBlock is plain, and once an answer has had
// maxHighlightTotal bytes highlighted its further blocks are plain.
func TestHighlightBudgets(t *testing.T) {
	assert.Equal(t, 2, maxHighlightTotal/maxHighlightBlock, "the test below expects two full blocks to fit")
	line := "x := compute(a, b) // step\n"
	big := strings.Repeat(line, maxHighlightBlock/len(line)+1)
	out := Render("```go\n"+big+"```\n", nil, Options{Anchor: "m1", Now: stopped})
	assert.True(t, strings.HasPrefix(out, `<pre><code class="language-go">x := compute`), "an oversized block is plain")
	assert.NotContains(t, out, `<span`)

	code := strings.Repeat(line, (maxHighlightBlock-100)/len(line))
	block := "```go\n" + code + "```\n\n"
	n := maxHighlightTotal/len(code) + 2
	out = Render(strings.Repeat(block, n), nil, Options{Anchor: "m1", Now: stopped})
	highlighted := strings.Count(out, `<pre class="chroma">`)
	plain := strings.Count(out, `<pre><code class="language-go">`)
	assert.Equal(t, maxHighlightTotal/len(code), highlighted)
	assert.Equal(t, n, highlighted+plain)
	assert.Positive(t, plain)

	// Every render has its own budget: the same answer again is highlighted the same way.
	again := Render(strings.Repeat(block, n), nil, Options{Anchor: "m1", Now: stopped})
	assert.Equal(t, out, again)
}

func TestHighlightCSS(t *testing.T) {
	css, err := HighlightCSS()
	require.NoError(t, err)
	assert.Contains(t, css, "@media (prefers-color-scheme: light) {\n  .chroma .err {")
	assert.Contains(t, css, "@media (prefers-color-scheme: dark) {\n  .chroma .err {")
	assert.Contains(t, css, "  .chroma .k {")
	assert.NotContains(t, css, ".bg {", "the page's own code block background applies")
	assert.NotContains(t, css, "/* Keyword */")
	// Every class the CSS styles is one the sanitiser keeps.
	for _, m := range regexp.MustCompile(`\.chroma \.([a-z0-9]+) \{`).FindAllStringSubmatch(css, -1) {
		assert.Regexp(t, chromaClassRE, m[1])
	}
}

// TestHighlightLanguagesResolve: every allowed lexer name is one chroma has (a typo would
// silently leave that language plain), and a language outside the list stays plain.
func TestHighlightLanguagesResolve(t *testing.T) {
	for name := range highlightLanguages {
		l := lexers.Get(lexerAlias(name))
		require.NotNil(t, l, name)
		assert.Equal(t, name, l.Config().Name)
	}
	out := Render("```brainfuck\n+[>+<-].\n```\n", nil, Options{Anchor: "m1", Now: stopped})
	assert.Equal(t, "<pre><code class=\"language-brainfuck\">+[&gt;+&lt;-].\n</code></pre>\n", out)
}

// TestSourcesSiteAndCardData: the sources list names a corpus page's site by its document title
// (or "知识库" when that is also the entry's title) instead of the server's address, and on the
// desktop (MessageID set) carries the source card's retrieval time and lead; share pages do not.
func TestSourcesSiteAndCardData(t *testing.T) {
	at := time.Date(2026, 3, 1, 8, 30, 0, 0, time.FixedZone("CST", 8*3600))
	cits := []citations.Citation{
		{N: 1, URL: "http://127.0.0.1:8080/kb/annual-leave", Title: "年假规定与申请方法", RetrievedAt: &at, Lead: "## 年假天数\n| a | b |\n|---|---|"},
		{N: 2, URL: "http://127.0.0.1:8080/kb/travel", Title: "差旅标准 · 住宿"},
		{N: 3, URL: "https://www.example.com/x", Title: "Example", Lead: "<b>bold</b> [^1^]"},
	}
	site := func(u string) string {
		switch u {
		case cits[0].URL:
			return "年假规定与申请方法"
		case cits[1].URL:
			return "差旅管理办法"
		}
		return ""
	}
	out := Render("a[^1^] b[^2^] c[^3^]", cits, Options{Anchor: "m1", MessageID: 9, SiteName: site})
	assert.Contains(t, out, `年假规定与申请方法</a> <span class="src-domain">知识库</span>`)
	assert.Contains(t, out, `差旅标准 · 住宿</a> <span class="src-domain">差旅管理办法</span>`)
	assert.Contains(t, out, `Example</a> <span class="src-domain">example.com</span>`)
	assert.NotContains(t, out, "127.0.0.1</span>")
	assert.Contains(t, out, `<time class="src-time" datetime="2026-03-01T00:30:00Z">2026-03-01 00:30 UTC</time>`)
	assert.Contains(t, out, `<span class="src-lead">年假天数
a · b</span>`)
	assert.Contains(t, out, `<span class="src-lead">&lt;b&gt;bold&lt;/b&gt;</span>`)
	en := Render("a[^1^]", cits, Options{Anchor: "m1", Lang: "en", SiteName: site})
	assert.Contains(t, en, `<span class="src-domain">Knowledge base</span>`)
	assert.NotContains(t, en, "src-time", "share pages carry no card data")
	assert.NotContains(t, en, "src-lead")
	// Without SiteName the domain is shown, as before.
	assert.Contains(t, Render("a[^1^]", cits, Options{}), `<span class="src-domain">127.0.0.1</span>`)
}

// TestRenderExcerpt: an excerpt shows as markdown (no "##", no table pipes), without markers, and
// links only to URLs it holds itself (which the link rule counts as seen by the run), never to
// a script.
func TestRenderExcerpt(t *testing.T) {
	out := RenderExcerpt("## 年假天数\n\n| 工龄 | 天数 |\n| --- | --- |\n| 1 | 5 |\n\n见 [指南](https://kb.example/guide)[^1^] 与 [别处](javascript:alert(1))。\n\n参考 https://kb.example/guide")
	assert.Contains(t, out, "<h2>年假天数</h2>")
	assert.Contains(t, out, "<td>5</td>")
	assert.NotContains(t, out, "| ---")
	assert.NotContains(t, out, "[^1^]")
	assert.NotContains(t, out, "<sup")
	assert.Contains(t, out, `<a href="https://kb.example/guide"`)
	assert.NotContains(t, out, "javascript")
	assert.Contains(t, out, "别处")
}

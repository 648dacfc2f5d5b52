package markdown

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/citegate/citegate/citations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
)

var update = flag.Bool("update", false, "rewrite the golden .html files under testdata/")

// goldenCase is the optional <name>.json beside <name>.md.
type goldenCase struct {
	Lang      string               `json:"lang"`
	MessageID uint64               `json:"messageId"`
	Citations []citations.Citation `json:"citations"`
	// Allow lists the URLs the answer may show besides its citations (metadata.links.allowed).
	Allow []string `json:"allow"`
}

// TestGolden renders every testdata/*.md with its .json and compares with the .html beside it.
// Regenerate with: go test ./citations/markdown -run TestGolden -update
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".md")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			require.NoError(t, err)
			var gc goldenCase
			if raw, err := os.ReadFile(strings.TrimSuffix(in, ".md") + ".json"); err == nil {
				require.NoError(t, json.Unmarshal(raw, &gc))
			} else {
				require.ErrorIs(t, err, os.ErrNotExist)
			}
			opt := Options{Lang: gc.Lang, Anchor: "m" + name, MessageID: gc.MessageID, Now: stopped}
			if gc.Allow != nil {
				opt.AllowLink = citations.AllowList(gc.Allow)
			}
			got := Render(string(src), gc.Citations, opt)
			assertSafe(t, got)
			golden := strings.TrimSuffix(in, ".md") + ".html"
			if *update {
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "missing golden file; run with -update")
			assert.Equal(t, string(want), got)
		})
	}
}

// assertSafe parses html and fails on anything that could run script: script/iframe/object
// elements, on* attributes, and URL attributes with a scheme other than http(s)/mailto.
func assertSafe(t testing.TB, out string) {
	t.Helper()
	z := html.NewTokenizer(strings.NewReader(out))
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		tok := z.Token()
		switch tok.Data {
		case "script", "iframe", "object", "embed", "style", "svg", "form", "input", "textarea":
			if tok.Data == "input" && attr(tok, "type") == "checkbox" && attr(tok, "disabled") != "-" {
				continue // GFM task list boxes are inert
			}
			t.Fatalf("dangerous element <%s> in %q", tok.Data, out)
		}
		for _, a := range tok.Attr {
			if strings.HasPrefix(strings.ToLower(a.Key), "on") || a.Key == "style" || a.Key == "srcdoc" {
				t.Fatalf("dangerous attribute %s on <%s> in %q", a.Key, tok.Data, out)
			}
			if a.Key == "href" || a.Key == "src" {
				v := strings.ToLower(strings.TrimSpace(a.Val))
				if i := strings.IndexAny(v, ":/?#"); i >= 0 && v[i] == ':' {
					scheme := v[:i]
					if scheme != "http" && scheme != "https" && scheme != "mailto" {
						t.Fatalf("%s=%q on <%s>", a.Key, a.Val, tok.Data)
					}
				}
			}
		}
	}
}

func attr(tok html.Token, key string) string {
	for _, a := range tok.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return "-"
}

func cite(n int, u, title string) citations.Citation {
	return citations.Citation{N: n, URL: u, Title: title}
}

var supRE = regexp.MustCompile(`<sup class="cite-ref"><a id="([^"]+)" href="#([^"]+)" data-n="(\d+)" data-k="(\d+)">(\d+)</a></sup>`)

// TestRenderBehaviour states the rules directly, independent of the golden files.
func TestRenderBehaviour(t *testing.T) {
	two := []citations.Citation{cite(2, "https://two.example/", "Two"), cite(5, "https://five.example/", "Five")}
	tests := []struct {
		name    string
		content string
		cits    []citations.Citation
		opt     Options
		// sups lists the expected superscripts in order as "n:k".
		sups     []string
		contains []string
		absent   []string
	}{
		{
			name: "display numbers follow n order", content: "a[^5^] b[^2^] c[^5^]", cits: two,
			sups: []string{"5:2", "2:1", "5:2"}, contains: []string{`<summary>来源 2</summary>`, `<details class="sources" open="">`},
		},
		{
			name: "unknown markers vanish", content: "x[^3^]y[^0^]z", cits: two,
			contains: []string{"<p>xyz</p>"}, absent: []string{"[^"},
		},
		{
			name: "code span keeps marker", content: "`[^2^]` and [^2^]", cits: two,
			sups: []string{"2:1"}, contains: []string{"<code>[^2^]</code>"},
		},
		{
			name: "fenced code keeps marker", content: "```\n[^2^]\n```\n", cits: two,
			contains: []string{"<pre><code>[^2^]\n</code></pre>"}, absent: []string{"cite-ref"},
		},
		{
			name: "marker inside link text moves after the link", content: "[see [^5^]](https://l.example/)", cits: two,
			opt:  Options{AllowLink: citations.AllowList([]string{"https://l.example/"})},
			sups: []string{"5:1"}, contains: []string{`see </a><sup class="cite-ref">`},
		},
		{
			name: "digits beyond the shared bound are text", content: "[^1234567890^]",
			cits: []citations.Citation{cite(1234567890, "https://x.example/", "X")}, contains: []string{"[^1234567890^]"},
		},
		{
			name: "english labels", content: "a[^2^]b[^5^]", cits: two, opt: Options{Lang: "en-GB", MessageID: 4}, sups: []string{"2:1", "5:2"},
			contains: []string{"<summary>Sources 2</summary>", `data-message="4"`, ">Excerpt</button>"},
		},
		{
			name: "no message id no preview button", content: "a[^2^]", cits: two, sups: []string{"2:1"},
			absent: []string{"<button"},
		},
		{
			name: "four sources collapse", content: "a[^1^][^2^][^3^][^4^]", sups: []string{"1:1", "2:2", "3:3", "4:4"},
			cits:     []citations.Citation{cite(1, "https://a.example/", "A"), cite(2, "https://b.example/", "B"), cite(3, "https://c.example/", "C"), cite(4, "https://d.example/", "D")},
			contains: []string{`<details class="sources"><summary>来源 4</summary>`},
		},
		{
			name: "no citations no section", content: "plain [^1^]", absent: []string{"<details", "来源"},
			contains: []string{"<p>plain </p>"},
		},
		{
			name: "javascript citation dropped and its marker vanishes", content: "a[^1^]b[^2^]",
			cits:     []citations.Citation{cite(1, "javascript:alert(1)", "JS"), cite(2, "https://ok.example/", "OK")},
			sups:     []string{"2:1"},
			absent:   []string{"javascript", "来源 2"},
			contains: []string{"来源 1"},
		},
		{
			name: "external links get target and rel", content: "[x](https://e.example/)",
			opt:      Options{AllowLink: citations.AllowList([]string{"https://e.example/"})},
			contains: []string{`href="https://e.example/"`, `target="_blank"`, "noopener", "noreferrer"},
			absent:   []string{"nofollow"},
		},
		{
			name: "raw html is shown as text", content: "<b>hi</b> <script>alert(1)</script>",
			contains: []string{"&lt;b&gt;hi&lt;/b&gt;"}, absent: []string{"<b>", "<script"},
		},
		{
			name: "unsafe anchor replaced", content: "a[^2^]", cits: two, opt: Options{Anchor: `x" onmouseover="y`}, sups: []string{"2:1"},
			contains: []string{`href="#cite-src-1"`, `id="cite-src-1"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Render(tc.content, tc.cits, tc.opt)
			assertSafe(t, got)
			var sups []string
			for _, m := range supRE.FindAllStringSubmatch(got, -1) {
				require.Equal(t, m[4], m[5], "visible number is the display number")
				require.Equal(t, tc.opt.anchor()+"-src-"+m[4], m[2])
				require.Contains(t, got, `id="`+m[2]+`"`, "every superscript points at an entry")
				sups = append(sups, m[3]+":"+m[4])
			}
			assert.Equal(t, tc.sups, sups)
			for _, s := range tc.contains {
				assert.Contains(t, got, s)
			}
			for _, s := range tc.absent {
				assert.NotContains(t, got, s)
			}
		})
	}
}

func TestSuperscriptIDsUnique(t *testing.T) {
	cits := []citations.Citation{cite(1, "https://a.example/", "A"), cite(2, "https://b.example/", "B")}
	got := RenderBody("[^1^][^1^][^2^]\n\n[^1^]", cits, Options{Anchor: "m1"})
	ids := regexp.MustCompile(`id="([^"]+)"`).FindAllStringSubmatch(got, -1)
	require.Len(t, ids, 4)
	seen := map[string]bool{}
	for _, m := range ids {
		require.False(t, seen[m[1]], "duplicate id %s", m[1])
		seen[m[1]] = true
	}
	assert.True(t, seen["m1-ref-1-3"])
	assert.True(t, seen["m1-ref-2-1"])
}

func TestDisplayTitle(t *testing.T) {
	long := strings.Repeat("长", 61)
	tests := []struct{ title, fallback, want string }{
		{"Short", "x.example", "Short"},
		{"  spaced \n title ", "x", "spaced title"},
		{"", "host.example/path", "host.example/path"},
		{strings.Repeat("a", 60), "x", strings.Repeat("a", 60)},
		{long, "x", strings.Repeat("长", 59) + "…"},
	}
	for _, tc := range tests {
		got := displayTitle(tc.title, tc.fallback)
		assert.Equal(t, tc.want, got)
		assert.LessOrEqual(t, len([]rune(got)), MaxTitleRunes)
	}
}

func TestDescribeURL(t *testing.T) {
	tests := []struct{ in, domain, fallback string }{
		{"https://www.Example.com/a/b/", "example.com", "example.com/a/b"},
		{"https://host.example:8443", "host.example", "host.example"},
		{"http://h.example/%E5%8F%91%E7%A5%A8?q=1", "h.example", "h.example/发票"},
	}
	for _, tc := range tests {
		d, f := describeURL(tc.in)
		assert.Equal(t, tc.domain, d, tc.in)
		assert.Equal(t, tc.fallback, f, tc.in)
	}
}

func TestRenderPlain(t *testing.T) {
	assert.Equal(t, "<p class=\"plain\">a &lt;b&gt; &amp;<br>\nc [^1^]</p>", RenderPlain("a <b> &\r\nc [^1^]\n"))
	assert.Equal(t, "", RenderPlain(" \n"))
}

func TestRenderSourcesEmpty(t *testing.T) {
	assert.Equal(t, "", RenderSources(nil, Options{}))
	assert.Equal(t, "", RenderSources([]citations.Citation{cite(1, "data:text/html,x", "x"), cite(0, "https://a.example/", "A")}, Options{}))
}

// TestConcurrentRender guards the shared goldmark instance: per-render state travels in the parser
// context, so parallel renders must not see each other's numbers (run with -race).
func TestConcurrentRender(t *testing.T) {
	t.Parallel()
	done := make(chan string, 16)
	for i := range 16 {
		go func() {
			n := i%3 + 1
			cits := []citations.Citation{cite(n, "https://a.example/", "A")}
			done <- RenderBody("x[^1^][^2^][^3^]", cits, Options{Anchor: "a"})
		}()
	}
	for range 16 {
		got := <-done
		require.Len(t, supRE.FindAllString(got, -1), 1, got)
	}
}

func FuzzRender(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.md"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err == nil {
			f.Add(string(b), "<img src=x onerror=alert(1)>", "https://a.example/")
		}
	}
	f.Add("[^1^]`[^1^]`<script>", "t", "javascript:alert(1)")
	f.Add("[x [^1^]](https://a/[^1^])", "", "https://www.a.example/p")
	// Issue 7 point 9: pathological emphasis (over the budget, rendered without emphasis parsing).
	f.Add(strings.Repeat("_a**", 2000)+"[^1^]", "t", "https://a.example/")
	f.Add(strings.Repeat("[a](", 900)+"[^1^] https://evil.example/", "t", "https://a.example/")
	f.Add(strings.Repeat("> ", 40)+"[^1^] <script>", "t", "https://a.example/")
	f.Add("[官网](https://evil.example) https://ok.example/a。http[s](x)://evil.example ![i](https://evil.example/i)", "t", "https://a.example/")
	allow := citations.AllowList([]string{"https://ok.example/a"})
	f.Fuzz(func(t *testing.T, content, title, u string) {
		cits := []citations.Citation{cite(1, u, title), cite(2, "https://b.example/", title)}
		out := Render(content, cits, Options{Anchor: "f", MessageID: 1, AllowLink: allow})
		if strings.Contains(strings.ToLower(out), "<script") {
			t.Fatalf("script in output: %q", out)
		}
		assertSafe(t, out)
		assertOnlyAllowedURLs(t, out, allow, cits)
	})
}

func BenchmarkRender(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("testdata", "text_markers.md"))
	require.NoError(b, err)
	content := strings.Repeat(string(src)+"\n", 10) // ~1.5 KB answer with 40 markers
	cits := []citations.Citation{cite(2, "https://kb.example.com/invoice/void", "发票作废与重开"), cite(5, "https://www.chinatax.gov.cn/red-invoice?id=7", "红字发票开具流程")}
	b.ReportAllocs()
	b.SetBytes(int64(len(content)))
	loopCPU(b, func() { _ = Render(content, cits, Options{Anchor: "m1", MessageID: 1}) })
}

package citations

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const N = HiddenLinkNotice

var testAllow = AllowList([]string{"https://ok.example/a", "https://ok.example/p_(x)", "http://www.ok.example", "https://ok.example/"})

func TestFilterLinksTable(t *testing.T) {
	cases := []struct {
		name, in, want string
		hidden         int
	}{
		{"plain", "没有链接的回答。", "没有链接的回答。", 0},
		{"verified bare", "见 https://ok.example/a 。", "见 https://ok.example/a 。", 0},
		{"unverified bare", "见 https://evil.example/x 。", "见 " + N + " 。", 1},
		{"cjk punctuation after url", "https://a.example/x。然后", N + "。然后", 1},
		{"cjk punctuation after verified url", "https://ok.example/a。然后", "https://ok.example/a。然后", 0},
		{"chinese right after url", "https://evil.example/x然后", N + "然后", 1},
		{"trailing dot", "See https://ok.example/a.", "See https://ok.example/a.", 0},
		{"balanced parens", "(see https://ok.example/p_(x))", "(see https://ok.example/p_(x))", 0},
		{"unbalanced paren", "(https://ok.example/a)", "(https://ok.example/a)", 0},
		{"mid word", "xhttps://evil.example", "x" + N, 1},
		{"upper case scheme", "HTTPS://EVIL.example/", N, 1},
		{"scheme only", "http:// 不是链接", "http:// 不是链接", 0},
		{"marker after url", "https://ok.example/a[^1^]", "https://ok.example/a[^1^]", 0},
		{"markdown link unverified", "看[官网](https://evil.example.com)吧", "看官网吧", 1},
		{"markdown link verified", "看[官网](https://ok.example/a)吧", "看[官网](https://ok.example/a)吧", 0},
		{"link with title", `[t](<https://evil.example/a b> "title")`, "t", 1},
		{"verified link title with url", `[t](https://ok.example/a "see https://evil.example")`, `[t](https://ok.example/a "see ` + N + `")`, 1},
		{"relative link", "[t](/admin)", "t", 1},
		{"javascript link", "[t](javascript:alert(1))", "t", 1},
		{"markers inside link text", "[红冲[^1^]](https://evil.example)", "红冲[^1^]", 1},
		{"url as link text", "[https://evil.example](https://ok.example/a)", "[" + N + "](https://ok.example/a)", 1},
		{"image unverified", "![图](https://evil.example/i.png)", "图", 1},
		{"image verified", "![图](https://ok.example/a)", "![图](https://ok.example/a)", 0},
		{"image in link", "[![a](https://evil.example/i)](https://evil.example)", "a", 2},
		{"autolink unverified", "<https://evil.example/x>", N, 1},
		{"autolink verified", "<https://ok.example/a>", "<https://ok.example/a>", 0},
		{"autolink mailto", "<mailto:a@evil.example>", N, 1},
		{"email autolink kept", "<a@b.example>", "<a@b.example>", 0},
		{"www unverified", "visit www.evil.example now", "visit " + N + " now", 1},
		{"www verified", "visit www.ok.example now", "visit www.ok.example now", 0},
		{"www inside word", "awww.evil.example", "awww.evil.example", 0},
		{"reference definition", "[a][r]\n\n[r]: https://evil.example", "[a][r]\n\n[r]: " + N, 1},
		{"not a link", "[注] 见下文", "[注] 见下文", 0},
		{"escaped bracket", `\[t](https://evil.example)`, `\[t](` + N + ")", 1},
		{"inline code keeps url", "用 `https://evil.example` 测试", "用 `https://evil.example` 测试", 0},
		{"inline code link", "`[t](https://evil.example)`", "`[t](https://evil.example)`", 0},
		{"unmatched backtick", "` https://evil.example", "` " + N, 1},
		{"double backticks", "``a ` https://evil.example``", "``a ` https://evil.example``", 0},
		{"fenced code", "```sh\ncurl https://evil.example\n```\nhttps://evil.example", "```sh\ncurl https://evil.example\n```\n" + N, 1},
		{"tilde fence", "~~~\nhttps://evil.example\n~~~", "~~~\nhttps://evil.example\n~~~", 0},
		{"unclosed fence", "```\nhttps://evil.example\n", "```\nhttps://evil.example\n", 0},
		{"short closing fence", "````\n```\nhttps://evil.example\n````\nhttps://evil.example", "````\n```\nhttps://evil.example\n````\n" + N, 1},
		{"backtick info string not a fence", "``` a`b\nhttps://evil.example", "``` a`b\n" + N, 1},
		{"indented code", "text\n\n    https://evil.example\n", "text\n\n    https://evil.example\n", 0},
		{"indented paragraph continuation", "text\n    https://evil.example\n", "text\n    " + N + "\n", 1},
		{"list continuation", "- item\n\n    https://evil.example\n", "- item\n\n    " + N + "\n", 1},
		{"fence in list", "- x\n  ```\n  https://evil.example\n  ```\n", "- x\n  ```\n  https://evil.example\n  ```\n", 0},
		{"fence in quote", "> ```\n> https://evil.example\n> ```\n", "> ```\n> https://evil.example\n> ```\n", 0},
		{"code span across lines", "`a\nhttps://evil.example`", "`a\nhttps://evil.example`", 0},
		{"code span stops at paragraph", "`a\n\nhttps://evil.example`", "`a\n\n" + N + "`", 1},
		{"raw html href", `<a href="https://evil.example">x</a>`, `<a href="` + N + `">x</a>`, 1},
		{"table cell", "| a | https://evil.example |", "| a | " + N + " |", 1},
		{"bold url", "**https://evil.example/x**", "**" + N + "**", 1},
		{"url in json escape", `\"https://evil.example\"`, `\"` + N + `\"`, 1},
		{"idn host", "https://例子.测试/x", N, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, hidden, _ := FilterLinks(c.in, testAllow)
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.hidden, hidden)
			assertChunkings(t, c.in, testAllow)
		})
	}
}

// assertChunkings checks the streaming invariant for every split into two and three pieces and
// for byte-by-byte delivery.
func assertChunkings(t *testing.T, text string, allow func(string) bool) {
	t.Helper()
	want, wantHidden, _ := FilterLinks(text, allow)
	check := func(parts []string) {
		t.Helper()
		f := NewLinkFilter(allow)
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(f.Push(p))
		}
		b.WriteString(f.Flush())
		require.Equal(t, want, b.String(), "split %q", parts)
		require.Equal(t, wantHidden, f.Hidden(), "split %q", parts)
	}
	for i := 0; i <= len(text); i++ {
		check([]string{text[:i], text[i:]})
		for j := i; j <= len(text) && len(text) < 200; j++ {
			check([]string{text[:i], text[i:j], text[j:]})
		}
	}
	var bytes []string
	for i := range len(text) {
		bytes = append(bytes, text[i:i+1])
	}
	check(bytes)
}

func TestLinkFilterStreams(t *testing.T) {
	// Ordinary text goes out at once; only a possible URL is held back.
	f := NewLinkFilter(testAllow)
	assert.Equal(t, "结论是红冲。", f.Push("结论是红冲。"))
	assert.Equal(t, "见 ", f.Push("见 https://evil.exa"))
	assert.Equal(t, len("https://evil.exa"), f.Pending())
	assert.Equal(t, N+" 然后", f.Push("mple/x 然后"))
	assert.Equal(t, "", f.Push("[官网"))
	assert.Equal(t, "", f.Push("](https://evil.example"))
	assert.Equal(t, "官网 ok\n", f.Push(") ok\n"))
	assert.Equal(t, "```\n", f.Push("```\n"))
	assert.Equal(t, "https://evil.example\n", f.Push("https://evil.example\n"))
	assert.Equal(t, "```\n", f.Push("```\n"))
	assert.Equal(t, "", f.Push("https://evil.example"))
	assert.Equal(t, N, f.Flush())
	assert.Equal(t, 3, f.Hidden())
}

func TestLinkSet(t *testing.T) {
	s := NewLinkSet()
	s.AddURL(" https://r.example/a ")
	s.AddURL("ftp://x.example/")
	s.AddText(`{"results":[{"url":"https:\/\/t.example\/p?a=1\u0026b=2","content":"see https://c.example/x。 and www.w.example"}]}`)
	s.AddText("用户说：看看 http://u.example/page.")
	for _, u := range []string{"https://r.example/a", "https://t.example/p?a=1&b=2", "https://c.example/x", "http://www.w.example", "https://www.w.example", "http://u.example/page"} {
		assert.True(t, s.Allows(u), u)
	}
	for _, u := range []string{"ftp://x.example/", "https://evil.example", "https://r.example/a/b", "http://u.example/page."} {
		assert.False(t, s.Allows(u), u)
	}
	var nilSet *LinkSet
	assert.False(t, nilSet.Allows("https://r.example/a"))
	out, hidden, shown := FilterLinks("[a](https://t.example/p?a=1&b=2) https://c.example/x https://c.example/x", s.Allows)
	assert.Equal(t, "[a](https://t.example/p?a=1&b=2) https://c.example/x https://c.example/x", out)
	assert.Zero(t, hidden)
	assert.Equal(t, []string{"https://t.example/p?a=1&b=2", "https://c.example/x"}, shown)
	out, hidden, _ = FilterLinks("https://evil.example", nil)
	assert.Equal(t, N, out)
	assert.Equal(t, 1, hidden)
}

func TestSafeText(t *testing.T) {
	out, hidden := SafeText("结论[^1^] 见 [官网](https://evil.example)，原文 https://ok.example/a[^2^]。", testAllow)
	assert.Equal(t, "结论 见 官网，原文 https://ok.example/a。", out)
	assert.Equal(t, 1, hidden)
}

func TestVerifyIgnoresMarkersInCode(t *testing.T) {
	reg := BuildRegistry([]ToolResult{{Tool: ToolWebSearch, Content: `{"query":"q","results":[` +
		`{"title":"a","url":"https://a.example/","content":"x"},{"title":"b","url":"https://b.example/","content":"y"},` +
		`{"title":"c","url":"https://c.example/","content":"z"}],"total_results":3}`}})
	content := "正文[^1^]，代码 `[^2^]` 里的不算。\n\n```\nx[^3^]\n```\n\n    [^3^] indented\n"
	v := Verify(content, reg)
	require.Len(t, v.Citations, 1)
	assert.Equal(t, 1, v.Citations[0].N)
	assert.Equal(t, 1, v.Seen)
	assert.Equal(t, 1, v.Kept)
}

func TestCodeSpans(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"a `b` c", []string{"`b`"}},
		{"a `` b ` `` c", []string{"`` b ` ``"}},
		{"a ` b", nil},
		{"\\`a` b`", []string{"` b`"}},
		{"```go\nx\n```\ny", []string{"```go\nx\n```\n"}},
		{"~~~\nx", []string{"~~~\nx"}},
		{"p\n\n    code\n    more\nq", []string{"    code\n    more\n"}},
		{"p\n    not code", nil},
	}
	for _, c := range cases {
		var got []string
		for _, s := range CodeSpans(c.in) {
			got = append(got, c.in[s.Start:s.End])
		}
		assert.Equal(t, c.want, got, "%q", c.in)
	}
}

func TestLinkSnapshot(t *testing.T) {
	s := NewLinkSet()
	empty := s.Snapshot()
	s.AddText("见 https://a.example/x")
	snap := s.Snapshot()
	s.AddURL("https://b.example/")
	assert.Zero(t, empty.Len())
	assert.False(t, empty.Allows("https://a.example/x"))
	assert.True(t, snap.Allows(" https://a.example/x"))
	assert.False(t, snap.Allows("https://b.example/"), "a snapshot does not follow its set")
	assert.Equal(t, 1, snap.Len())
	var none *LinkSnapshot
	assert.False(t, none.Allows("https://a.example/x"))
	assert.Zero(t, none.Len())
}

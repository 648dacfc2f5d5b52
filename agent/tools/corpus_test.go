package tools

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/citegate/citegate/agent"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/encoding/simplifiedchinese"
)

const testPublicURL = "http://kb.example.test:8080"

var (
	sampleOnce sync.Once
	sample     *Corpus
	sampleErr  error
)

// loadSample returns the bundled corpus, loaded once for the whole test binary: a Corpus is
// read-only after LoadCorpus, and building the index under -race is the slowest part of the tests.
func loadSample(t testing.TB) *Corpus {
	t.Helper()
	sampleOnce.Do(func() { sample, sampleErr = LoadCorpus("", testPublicURL) })
	require.NoError(t, sampleErr)
	return sample
}

// load loads a corpus that the test closes when it ends.
func load(t testing.TB, dir, publicURL string) *Corpus {
	t.Helper()
	c, err := LoadCorpus(dir, publicURL)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

func TestSampleCorpusShape(t *testing.T) {
	c := loadSample(t)
	require.GreaterOrEqual(t, c.Len(), 10)
	require.LessOrEqual(t, c.Len(), 14)
	english := 0
	for _, d := range c.Docs() {
		assert.NotEmpty(t, d.Title, d.Slug)
		assert.Equal(t, testPublicURL+"/kb/"+d.Slug, d.URL)
		assert.NotContains(t, d.Text, "# ", "markdown syntax must not leak into text of %s", d.Slug)
		assert.False(t, strings.HasPrefix(d.Text, d.Title), "title is not repeated in text of %s", d.Slug)
		if !strings.ContainsFunc(d.Title, func(r rune) bool { return r >= 0x4e00 && r <= 0x9fff }) {
			english++
		}
	}
	assert.GreaterOrEqual(t, english, 2, "a few documents are in English")
}

func TestLocalSearchRanking(t *testing.T) {
	c := loadSample(t)
	tests := []struct {
		query    string
		wantSlug string
		excerpt  string // the passage must contain this
	}{
		{"电子发票抬头写错了怎么办？", "einvoice-title-correction", "红冲"},
		{"发票抬头开错了", "einvoice-title-correction", "抬头"},
		{"专票和普票有什么区别", "invoice-types", "专用发票"},
		{"餐饮费开什么发票", "invoice-types", "餐饮费"},
		{"年假有几天", "annual-leave", "年假"},
		{"年假可以结转吗", "annual-leave", "3 月 31 日"},
		{"出差住宿标准", "business-travel", "住宿"},
		{"出差伙食补贴多少钱", "business-travel", "100 元"},
		{"密码忘了怎么办", "password-reset", "password.example.com"},
		{"账号被锁定", "password-reset", "锁定"},
		{"新员工入职要带什么材料", "onboarding", "身份证"},
		{"申请显示器", "it-equipment", "显示器"},
		{"会议室怎么预订", "meeting-room", "会议室"},
		{"报销多久到账", "expense-reimbursement", "5 个工作日"},
		{"VPN 连不上", "vpn-access", "VPN"},
		// English queries still match (lower-casing, stemming, stop words).
		{"VPN authenticator MFA prompt", "vpn-access", "MFA"},
		{"Customer personal data", "data-security", "personal data"},
		{"USB drives", "data-security", "USB"},
		{"guest wifi code for visitors", "office-wifi", "Guest"},
		{"reporting a security incident", "data-security", "incident"},
		// The password guide has an English version for English questions.
		{"how do I reset my password?", "password-reset-en", "password.example.com"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			res, err := c.Search(context.Background(), tc.query, 5)
			require.NoError(t, err)
			require.NotEmpty(t, res)
			assert.Equal(t, testPublicURL+"/kb/"+tc.wantSlug, res[0].URL, "top hit for %q", tc.query)
			assert.Contains(t, res[0].Content, tc.excerpt)
			for _, r := range res {
				assert.LessOrEqual(t, utf8.RuneCountInString(r.Content), maxPassageRunes)
				assert.NotEmpty(t, r.Title)
				assert.True(t, strings.HasPrefix(r.URL, testPublicURL+"/kb/"))
			}
		})
	}
}

func TestLocalSearchPassageIsRelevantPart(t *testing.T) {
	c := loadSample(t)
	res, err := c.Search(context.Background(), "年假结转清零", 1)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Contains(t, res[0].Content, "结转")
	assert.NotContains(t, res[0].Content, "职工带薪年休假条例", "the passage is the matching section, not the opening")
	full, _ := c.Lookup(res[0].URL)
	assert.Less(t, utf8.RuneCountInString(res[0].Content), utf8.RuneCountInString(full.Text))
}

// TestPassageNeverEndsInAHeading checks that a passage does not end with a heading whose section
// did not fit: "剩余年假在哪里查" once got the 结转 section ending in "## 查询剩余年假", scored for the
// heading's words, without the sentence under it that answers.
func TestPassageNeverEndsInAHeading(t *testing.T) {
	c := loadSample(t)
	res, err := c.Search(context.Background(), "剩余年假在哪里查", 1)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Contains(t, res[0].Content, "我的假期余额")
	for _, q := range []string{"剩余年假在哪里查", "报销和发票有哪些规定", "年假有几天", "VPN session", "密码规则"} {
		res, err := c.Search(context.Background(), q, 5)
		require.NoError(t, err)
		for _, r := range res {
			lines := strings.Split(r.Content, "\n")
			assert.False(t, strings.HasPrefix(lines[len(lines)-1], "#"), "the passage of %s for %q ends in a heading:\n%s", r.Title, q, r.Content)
		}
	}
}

// TestPassageKeepsStructure checks that passages carry headings, list items and table rows as
// light Markdown, with every row under its table's header, so readers can pair cells with columns.
func TestPassageKeepsStructure(t *testing.T) {
	c := loadSample(t)
	res, err := c.Search(context.Background(), "差旅住宿标准是多少", 1)
	require.NoError(t, err)
	require.Len(t, res, 1)
	got := res[0].Content
	assert.Contains(t, got, "## 住宿标准（每间每晚上限）\n| 城市类别 | 普通员工 | 经理及以上 |\n| --- | --- | --- |\n| 一类：北京、上海、广州、深圳 | 600 元 | 800 元 |")
	assert.Contains(t, got, "| 三类：其他城市 | 350 元 | 450 元 |", "the window does not cut the table")

	res, err = c.Search(context.Background(), "年假有几天", 1)
	require.NoError(t, err)
	assert.Contains(t, res[0].Content, "| 满 20 年 | 15 天 |")

	res, err = c.Search(context.Background(), "how do I reset my password?", 1)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(res[0].Content, "## Reset your password yourself\n1. Open the password self-service portal"), res[0].Content)
}

// TestPassageRepeatsHeaderInsideLongTable: a passage that starts deep inside a table longer than a
// passage repeats the section heading and the table header before its rows.
func TestPassageRepeatsHeaderInsideLongTable(t *testing.T) {
	var md strings.Builder
	md.WriteString("# 城市列表\n\n开头的说明。\n\n## 城市补贴\n\n| 城市 | 补贴 |\n| --- | --- |\n")
	for i := range 60 {
		fmt.Fprintf(&md, "| 城市%02d号 | %d 元 |\n", i, 100+i)
	}
	md.WriteString("| 乌鲁木齐 | 999 元 |\n\n表后的段落。\n")
	html := "<html><head><title>Rates</title></head><body><h2>Hotel rates</h2><table><tr><th>City</th><th>Rate</th></tr>" +
		"<tr><td>Berlin</td><td>120 EUR</td></tr><tr><td>Pipe | City</td><td>90 EUR</td></tr></table><ul><li>Book early<ul><li>nested tip</li></ul></li></ul></body></html>"
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{"cities.md": []byte(md.String()), "rates.html": []byte(html)})
	c := load(t, dir, testPublicURL)

	res, err := c.Search(context.Background(), "乌鲁木齐", 1)
	require.NoError(t, err)
	require.Len(t, res, 1)
	got := res[0].Content
	assert.True(t, strings.HasPrefix(got, "## 城市补贴\n| 城市 | 补贴 |\n| --- | --- |\n| 城市"), got)
	assert.Contains(t, got, "| 乌鲁木齐 | 999 元 |")
	assert.NotContains(t, got, "开头的说明")
	assert.LessOrEqual(t, utf8.RuneCountInString(got), maxPassageRunes)

	res, err = c.Search(context.Background(), "Berlin rate", 1)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, "## Hotel rates\n| City | Rate |\n| --- | --- |\n| Berlin | 120 EUR |\n| Pipe \\| City | 90 EUR |\n- Book early\n- nested tip", res[0].Content)
}

func TestLocalSearchEdgeCases(t *testing.T) {
	c := loadSample(t)
	_, err := c.Search(context.Background(), "   ", 5)
	require.Error(t, err)

	res, err := c.Search(context.Background(), "zzzqqqxxyy", 5)
	require.NoError(t, err)
	assert.Empty(t, res)

	res, err = c.Search(context.Background(), "发票", 2)
	require.NoError(t, err)
	assert.Len(t, res, 2)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Search(ctx, "发票", 2)
	require.Error(t, err)
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, content, 0o644))
	}
}

func gbk(t testing.TB, s string) []byte {
	t.Helper()
	b, err := simplifiedchinese.GBK.NewEncoder().Bytes([]byte(s))
	require.NoError(t, err)
	return b
}

func TestLoadCorpusDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"handbook/Remote Work.md": []byte("# Remote work policy\n\nEmployees may work from home two days a week.\n\n- Ask your manager first.\n"),
		"canteen.html": []byte(`<html><head><title>食堂开放时间</title><script>alert(1)</script></head>
<body><h1>食堂开放时间</h1><p onclick="steal()">午餐 11:30–13:30，晚餐 17:30–19:30。</p><script>evil()</script><a href="javascript:alert(1)">x</a></body></html>`),
		"parking.txt":    []byte("停车场使用须知\n\n员工车辆凭工牌进出地下停车场。\n访客车位需提前一天预约。\n"),
		"legacy-gbk.txt": gbk(t, "快递收发\n\n快递统一寄到前台，每天 16:00 前揽收。"),
		"制度/考勤 管理.md":    []byte("# 考勤管理办法\n\n每月 3 日前完成上月考勤确认。"),
		".hidden.md":     []byte("# Secret\n\nnot indexed"),
		"notes.docx":     []byte("binary"),
		"empty.md":       []byte("   \n"),
	})
	c := load(t, dir, "https://intra.example.com/citegate/")
	require.Equal(t, 5, c.Len())

	docs := map[string]Doc{}
	for _, d := range c.Docs() {
		docs[d.Slug] = d
	}
	require.Contains(t, docs, "handbook-remote-work")
	assert.Equal(t, "Remote work policy", docs["handbook-remote-work"].Title)
	assert.Equal(t, "https://intra.example.com/citegate/kb/handbook-remote-work", docs["handbook-remote-work"].URL)
	assert.Contains(t, docs["handbook-remote-work"].Text, "two days a week")

	require.Contains(t, docs, "canteen")
	assert.Equal(t, "食堂开放时间", docs["canteen"].Title)
	assert.Contains(t, docs["canteen"].Text, "午餐 11:30–13:30")
	assert.NotContains(t, docs["canteen"].Text, "evil")

	require.Contains(t, docs, "parking")
	assert.Equal(t, "停车场使用须知", docs["parking"].Title)
	assert.Contains(t, docs["parking"].Text, "访客车位")

	require.Contains(t, docs, "制度-考勤-管理")
	zh := docs["制度-考勤-管理"]
	assert.Equal(t, "https://intra.example.com/citegate/kb/%E5%88%B6%E5%BA%A6-%E8%80%83%E5%8B%A4-%E7%AE%A1%E7%90%86", zh.URL)
	got, ok := c.Lookup(zh.URL)
	require.True(t, ok)
	assert.Equal(t, "考勤管理办法", got.Title)
	res0, body := get(t, c.Handler(), "/kb/%E5%88%B6%E5%BA%A6-%E8%80%83%E5%8B%A4-%E7%AE%A1%E7%90%86")
	assert.Equal(t, http.StatusOK, res0.StatusCode)
	assert.Contains(t, body, "<title>考勤管理办法</title>")

	require.Contains(t, docs, "legacy-gbk")
	assert.Equal(t, "快递收发", docs["legacy-gbk"].Title, "GBK text is decoded")

	res, err := c.Search(context.Background(), "work from home", 3)
	require.NoError(t, err)
	require.NotEmpty(t, res)
	assert.Equal(t, "https://intra.example.com/citegate/kb/handbook-remote-work", res[0].URL)

	res, err = c.Search(context.Background(), "快递几点揽收", 3)
	require.NoError(t, err)
	require.NotEmpty(t, res)
	assert.Equal(t, "快递收发", res[0].Title)
}

func TestLoadCorpusErrors(t *testing.T) {
	empty := t.TempDir()
	onlyOther := t.TempDir()
	writeFiles(t, onlyOther, map[string][]byte{"a.pdf": []byte("%PDF"), ".b.md": []byte("# B\n\nb")})
	file := filepath.Join(t.TempDir(), "doc.md")
	require.NoError(t, os.WriteFile(file, []byte("# A\n\na"), 0o644))

	tests := []struct {
		name, dir, publicURL, want string
	}{
		{"missing dir", filepath.Join(empty, "nope"), testPublicURL, "cannot read"},
		{"empty dir", empty, testPublicURL, "no documents"},
		{"no supported files", onlyOther, testPublicURL, "no documents"},
		{"file not dir", file, testPublicURL, "not a directory"},
		{"relative public URL", "", "/kb", "absolute http(s) URL"},
		{"empty public URL", "", "", "absolute http(s) URL"},
		{"ftp public URL", "", "ftp://example.com", "absolute http(s) URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCorpus(tc.dir, tc.publicURL)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLoadCorpusUnreadableFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{"ok.md": []byte("# OK\n\nfine")})
	// A dangling symlink cannot be opened, even by root.
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "broken.md")))
	_, err := LoadCorpus(dir, testPublicURL)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "broken.md")
}

func TestLoadCorpusDuplicateSlugsKeepBoth(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"faq.md":   []byte("# FAQ one\n\nfirst"),
		"faq.html": []byte("<title>FAQ two</title><p>second</p>"),
	})
	c := load(t, dir, testPublicURL)
	require.Equal(t, 2, c.Len())
	slugs := []string{c.Docs()[0].Slug, c.Docs()[1].Slug}
	assert.ElementsMatch(t, []string{"faq", "faq-2"}, slugs)
}

func TestLookup(t *testing.T) {
	c := loadSample(t)
	tests := []struct {
		url  string
		slug string
		ok   bool
	}{
		{testPublicURL + "/kb/annual-leave", "annual-leave", true},
		{testPublicURL + "/kb/annual-leave/", "annual-leave", true},
		{testPublicURL + "/kb/annual-leave?x=1#top", "annual-leave", true},
		{"HTTP://KB.Example.Test:8080/kb/annual-leave", "annual-leave", true},
		{testPublicURL + "/kb/nope", "", false},
		{testPublicURL + "/kb/", "", false},
		{"https://kb.example.test:8080/kb/annual-leave", "", false},
		{"http://kb.example.test/kb/annual-leave", "", false},
		{"http://other.example/kb/annual-leave", "", false},
		{testPublicURL + "/other/annual-leave", "", false},
		{"not a url", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			d, ok := c.Lookup(tc.url)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.slug, d.Slug)
		})
	}
	c2 := load(t, "", "https://example.com")
	_, ok := c2.Lookup("https://example.com:443/kb/annual-leave")
	assert.True(t, ok, "default port is the same host")
}

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func TestHandlerPages(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"guide.md": []byte("# 报销指南\n\n| 项目 | 时限 |\n| --- | --- |\n| 提交 | 60 天 |\n\n<script>alert(1)</script>\n\n正文 **加粗**。\n"),
		"raw.html": []byte(`<html><head><title>原始页面</title></head><body><h1>原始页面</h1><p style="x" onclick="evil()">内容 <img src="x" onerror="evil()"></p><iframe src="https://evil"></iframe></body></html>`),
		"note.txt": []byte("便签\n\n第一行 <b>不是标签</b>\n第二行"),
	})
	h := load(t, dir, testPublicURL).Handler()

	res, body := get(t, h, "/kb/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	assert.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")
	for _, want := range []string{"<title>知识库</title>", `href="guide"`, "报销指南", "原始页面", "便签"} {
		assert.Contains(t, body, want)
	}

	res, body = get(t, h, "/kb/guide")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, body, "<title>报销指南</title>")
	assert.Contains(t, body, "<h1>报销指南</h1>")
	assert.Contains(t, body, "<table>")
	assert.Contains(t, body, "<strong>加粗</strong>")
	assert.NotContains(t, body, "<script>")

	res, body = get(t, h, "/kb/raw")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, body, "<title>原始页面</title>")
	assert.Equal(t, 1, strings.Count(body, "<h1>"), "the document's own h1 is not doubled")
	for _, bad := range []string{"onclick", "onerror", "evil()", "<iframe", "<script"} {
		assert.NotContains(t, body, bad)
	}

	_, body = get(t, h, "/kb/note")
	assert.Contains(t, body, "<title>便签</title>")
	assert.Contains(t, body, "&lt;b&gt;不是标签&lt;/b&gt;")

	res, body = get(t, h, "/kb/missing")
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Contains(t, body, "未找到文档")

	res, _ = get(t, h, "/kb")
	assert.Equal(t, http.StatusMovedPermanently, res.StatusCode)
	assert.Equal(t, "/kb/", res.Header.Get("Location"))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/kb/guide", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

func TestHandlerServesSampleOverHTTP(t *testing.T) {
	c := loadSample(t)
	mux := http.NewServeMux()
	mux.Handle("/kb/", c.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/kb/einvoice-title-correction")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(b), "<title>电子发票抬头开错了怎么办</title>")
	assert.Contains(t, string(b), "先申请红冲原发票，再按正确抬头重新开具")
}

func TestClosedCorpus(t *testing.T) {
	c, err := LoadCorpus("", testPublicURL)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = c.Search(context.Background(), "年假", 3)
	require.Error(t, err)
	_, ok := c.Lookup(testPublicURL + "/kb/annual-leave")
	assert.True(t, ok)
}

func BenchmarkLoadCorpus(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c, err := LoadCorpus("", testPublicURL)
		if err != nil {
			b.Fatal(err)
		}
		_ = c.Close()
	}
}

func BenchmarkLocalSearch(b *testing.B) {
	c := load(b, "", testPublicURL)
	queries := []string{"电子发票抬头写错了怎么办？", "VPN authenticator MFA prompt", "出差住宿标准", "年假可以结转吗"}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Search(ctx, queries[i%len(queries)], 5); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCorpusConcurrentUse(t *testing.T) {
	c := loadSample(t)
	f := newFetcher(t, FetchOptions{}, c)
	ws := NewWebSearch(c, nil)
	h := c.Handler()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				res, err := c.Search(context.Background(), []string{"年假", "VPN", "发票抬头", "会议室"}[(i+j)%4], 3)
				assert.NoError(t, err)
				assert.NotEmpty(t, res)
				_, err = f.Fetch(context.Background(), testPublicURL+"/kb/annual-leave")
				assert.NoError(t, err)
				out, err := ws.Call(context.Background(), `{"query":"出差"}`)
				assert.NoError(t, err)
				assert.NotContains(t, out, `"error"`)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/kb/vpn-access", nil))
				assert.Equal(t, http.StatusOK, rec.Code)
			}
		}(i)
	}
	wg.Wait()
}

// BenchmarkWebSearchCall is one web_search tool call on the bundled corpus as a turn makes it.
// "cached": the four queries cycle, so after the first round each is answered from web_search's
// cache of encoded corpus results. "uncached": the corpus behind a plain Searcher, so every call
// decodes the arguments, searches, cleans and cuts each result's text and encodes the result.
func BenchmarkWebSearchCall(b *testing.B) {
	c := load(b, "", testPublicURL)
	b.Run("cached", func(b *testing.B) { benchWebSearch(b, NewWebSearch(c, nil)) })
	b.Run("uncached", func(b *testing.B) { benchWebSearch(b, NewWebSearch(&countingSearcher{s: c}, nil)) })
}

func benchWebSearch(b *testing.B, ws agent.Tool) {
	args := []string{`{"query":"电子发票抬头写错了怎么办？"}`, `{"query":"How do I reset my password?"}`, `{"query":"报销多久能到账？"}`, `{"query":"VPN 连不上怎么办？"}`}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if out, err := ws.Call(ctx, args[i%len(args)]); err != nil || strings.Contains(out, `"error"`) {
			b.Fatal(out, err)
		}
		i++
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// livePages is a local site whose pages can change between fetches.
type livePages struct {
	mu    sync.Mutex
	pages map[string]string
}

func (p *livePages) set(path, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pages[path] = body
}

func (p *livePages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	body, ok := p.pages[r.URL.Path]
	p.mu.Unlock()
	if !ok {
		http.Error(w, "gone", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(body))
}

type previewFixture struct {
	e       *testEnv
	tok     string
	site    *livePages
	siteURL string
	out     agent.Outcome
	long    string
}

// newPreviewFixture runs one turn whose model opens a local page (open_web_page through the real
// guarded fetcher, allowed to reach 127.0.0.1) and searches (a snippet from another local page and
// a long excerpt with astral characters), then cites all three.
func newPreviewFixture(t *testing.T, withFetch bool) *previewFixture {
	site := &livePages{pages: map[string]string{
		"/page":    "发票红冲说明\n\n电子发票抬头写错后，应先申请红冲原发票，再按正确抬头重新开具。",
		"/snippet": "报销制度\n\n差旅费用应在出差结束后 30 天内提交报销申请，逾期需部门负责人审批。\n其他内容。",
	}}
	ss := httptest.NewServer(site)
	t.Cleanup(ss.Close)
	fetcher, err := tools.NewFetcher(tools.FetchOptions{Allow: []string{"127.0.0.1"}}, nil)
	require.NoError(t, err)
	long := strings.Repeat("𝄞音符", 8000) // 4 UTF-16 units per repeat: 32,000 units
	f := &previewFixture{site: site, siteURL: ss.URL, long: long}
	f.e = newEnv(t, func(c *Config, a *agentCfg) {
		if withFetch {
			c.Fetch = func(ctx context.Context, url string) (string, error) {
				p, err := fetcher.Fetch(ctx, url)
				return p.Content, err
			}
		}
		a.Tools = []agent.Tool{
			tools.NewOpenWebPage(fetcher),
			fixedSearch{result: func(q string) string {
				return searchResult(q,
					[3]string{"报销制度", ss.URL + "/snippet", "差旅费用应在出差结束后 30 天内提交报销申请，…逾期需部门负责人审批。"},
					[3]string{"长文", "https://example.com/long", long},
				)
			}},
		}
		a.Model = &scriptedModel{
			calls: func(q string) []store.ToolCall {
				return []store.ToolCall{
					{ID: "call_1", Name: "open_web_page", Arguments: `{"url":"` + ss.URL + `/page"}`},
					{ID: "call_2", Name: "web_search", Arguments: `{"query":"报销"}`},
				}
			},
			answer: func(string, []string) string {
				return "先红冲再重开。[^1^] 报销 30 天内。[^2^] 长文。[^3^] 伪造。[^7^]"
			},
		}
	})
	u, tok := f.e.user("alice")
	f.tok = tok
	s := f.e.session(u, "preview")
	f.out = f.e.runTurn(s.ID, "电子发票抬头写错了怎么办？")
	require.Equal(t, store.PhaseCompleted, f.out.Phase, f.out.Error)
	require.Len(t, f.out.Citations, 3)
	return f
}

func (f *previewFixture) preview(t *testing.T, n int, query string) (int, http.Header, map[string]any) {
	t.Helper()
	status, hdr, body := f.e.do("GET", "/api/messages/"+itoa(int(f.out.FinalMessageID))+"/citations/"+itoa(n)+"/preview"+query, f.tok, nil)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &out), body)
	return status, hdr, out
}

func TestPreviewExcerptIsWhatTheModelSaw(t *testing.T) {
	f := newPreviewFixture(t, true)
	// What the model was given: the run's stored TOOL messages (annotated with refs).
	msgs, err := f.e.st.ListMessages(context.Background(), f.e.sessionOf(f.out.FinalMessageID))
	require.NoError(t, err)
	var page struct{ Content, URL string }
	var search struct {
		Results []struct{ Content, URL string }
	}
	for _, m := range msgs {
		switch m.ToolName {
		case "open_web_page":
			require.NoError(t, json.Unmarshal([]byte(m.Content), &page))
		case "web_search":
			require.NoError(t, json.Unmarshal([]byte(m.Content), &search))
		}
	}
	require.Len(t, search.Results, 2)

	status, hdr, p := f.preview(t, 1, "")
	require.Equal(t, http.StatusOK, status, p)
	assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
	assert.Equal(t, float64(1), p["n"])
	assert.Equal(t, page.URL, p["url"])
	assert.Equal(t, "open_web_page", p["tool"])
	assert.Equal(t, page.Content, p["excerpt"])
	assert.Equal(t, citations.Digest(page.Content), p["digest"])
	assert.Equal(t, f.out.Citations[0].Digest, p["digest"])
	assert.NotEmpty(t, p["retrievedAt"])
	assert.Equal(t, false, p["truncated"])
	assert.NotContains(t, p, "changed", "changed only with recheck")

	status, _, p = f.preview(t, 2, "")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "web_search", p["tool"])
	assert.Equal(t, search.Results[0].Content, p["excerpt"])
	assert.Equal(t, "报销制度", p["title"])

	// The long excerpt is cut at 16,384 UTF-16 units without splitting a surrogate pair.
	status, _, p = f.preview(t, 3, "")
	require.Equal(t, http.StatusOK, status)
	ex := p["excerpt"].(string)
	assert.True(t, utf8.ValidString(ex))
	units := len(utf16.Encode([]rune(ex)))
	assert.LessOrEqual(t, units, MaxExcerptUTF16)
	assert.Greater(t, units, MaxExcerptUTF16-2, "the cut keeps as much as fits")
	assert.True(t, strings.HasPrefix(f.long, ex))
	assert.Equal(t, true, p["truncated"])
	assert.Equal(t, citations.Digest(f.long), p["digest"], "the digest is of the full excerpt")

	// Not cited, dropped ([^7^]), zero, garbage: 404 like anything missing.
	for _, n := range []string{"4", "7", "0", "-1", "x"} {
		status, _, body := f.e.do("GET", "/api/messages/"+itoa(int(f.out.FinalMessageID))+"/citations/"+n+"/preview", f.tok, nil)
		assert.Equal(t, http.StatusNotFound, status, n)
		assert.JSONEq(t, `{"error":{"code":"not_found","message":"not found"}}`, body)
	}
	// Not a final assistant message.
	status, _, body := f.e.do("GET", "/api/messages/"+itoa(int(f.out.UserMessageID))+"/citations/1/preview", f.tok, nil)
	assert.Equal(t, http.StatusNotFound, status, body)
}

func TestPreviewRecheck(t *testing.T) {
	f := newPreviewFixture(t, true)
	status, _, p := f.preview(t, 1, "?recheck=1")
	require.Equal(t, http.StatusOK, status, p)
	assert.Equal(t, false, p["changed"], "unchanged page")
	status, _, p = f.preview(t, 2, "?recheck=1")
	require.Equal(t, http.StatusOK, status, p)
	assert.Equal(t, false, p["changed"], "snippet pieces still on the page")

	f.site.set("/page", "发票红冲说明\n\n政策已更新：请联系财务部门处理抬头错误。")
	f.site.set("/snippet", "报销制度\n\n差旅费用应在出差结束后 60 天内提交报销申请。")
	status, _, p = f.preview(t, 1, "?recheck=1")
	require.Equal(t, http.StatusOK, status, p)
	assert.Equal(t, true, p["changed"])
	assert.Equal(t, f.out.Citations[0].Digest, p["digest"], "the stored digest is reported, not the new one")
	status, _, p = f.preview(t, 2, "?recheck=1")
	require.Equal(t, http.StatusOK, status, p)
	assert.Equal(t, true, p["changed"])

	// A source that cannot be fetched: 502 with a clear error.
	f.site.mu.Lock()
	delete(f.site.pages, "/page")
	f.site.mu.Unlock()
	status, _, p = f.preview(t, 1, "?recheck=1")
	assert.Equal(t, http.StatusBadGateway, status)
	e := p["error"].(map[string]any)
	assert.Equal(t, "fetch_failed", e["code"])
	assert.Contains(t, e["message"], "could not fetch the source")
}

func TestPreviewRecheckUnavailableWithoutFetcher(t *testing.T) {
	f := newPreviewFixture(t, false)
	status, _, p := f.preview(t, 1, "?recheck=1")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "unavailable", p["error"].(map[string]any)["code"])
	status, _, _ = f.preview(t, 1, "")
	assert.Equal(t, http.StatusOK, status, "plain preview works without a fetcher")
}

func TestCutUTF16(t *testing.T) {
	cases := []struct {
		in    string
		max   int
		want  string
		trunc bool
	}{
		{"", 5, "", false},
		{"abc", 3, "abc", false},
		{"abcd", 3, "abc", true},
		{"a𝄞b", 2, "a", true}, // the pair does not fit in one unit
		{"a𝄞b", 3, "a𝄞", true},
		{"𝄞𝄞", 3, "𝄞", true},
		{"中文字", 2, "中文", true},
	}
	for _, c := range cases {
		got, trunc := cutUTF16(c.in, c.max)
		assert.Equal(t, c.want, got, c.in)
		assert.Equal(t, c.trunc, trunc, c.in)
	}
}

func TestSnippetPresent(t *testing.T) {
	page := "Line one.\n  The QUICK brown fox\njumps over the lazy dog. 中文 内容。"
	assert.True(t, snippetPresent("the quick brown fox jumps", page))
	assert.True(t, snippetPresent("quick brown … lazy dog", page))
	assert.True(t, snippetPresent("中文内容", page))
	assert.False(t, snippetPresent("quick red fox", page))
	assert.False(t, snippetPresent("quick brown … lazy cat", page))
	assert.False(t, snippetPresent("  ", page), "an empty snippet proves nothing")
}

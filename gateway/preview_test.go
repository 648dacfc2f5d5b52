package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	hits  atomic.Int64 // requests served
}

func (p *livePages) set(path, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pages[path] = body
}

func (p *livePages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.hits.Add(1)
	p.mu.Lock()
	body, ok := p.pages[r.URL.Path]
	p.mu.Unlock()
	if !ok {
		http.Error(w, "gone", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(body))
}

type previewFixture struct {
	e       *testEnv
	tok     string
	site    *livePages
	siteSrv *httptest.Server
	siteURL string
	out     agent.Outcome
	long    string
}

// newPreviewFixture runs one turn whose model opens a local page (open_web_page through the real
// guarded fetcher, allowed to reach 127.0.0.1) and searches (a snippet from another local page and
// a long excerpt with astral characters), then cites all three.
func newPreviewFixture(t *testing.T, withFetch bool, opts ...envOpt) *previewFixture {
	site := &livePages{pages: map[string]string{
		"/page":    "发票红冲说明\n\n电子发票抬头写错后，应先申请红冲原发票，再按正确抬头重新开具。",
		"/snippet": "报销制度\n\n差旅费用应在出差结束后 30 天内提交报销申请，逾期需部门负责人审批。\n其他内容。",
	}}
	ss := httptest.NewServer(site)
	t.Cleanup(ss.Close)
	fetcher, err := tools.NewFetcher(tools.FetchOptions{Allow: []string{"127.0.0.1"}}, nil)
	require.NoError(t, err)
	long := strings.Repeat("𝄞音符", 8000) // 4 UTF-16 units per repeat: 32,000 units
	f := &previewFixture{site: site, siteSrv: ss, siteURL: ss.URL, long: long}
	f.e = newEnv(t, append([]envOpt{func(c *Config, a *agentCfg) {
		if withFetch {
			c.Fetch = liveFetch(fetcher)
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
	}}, opts...)...)
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

// liveFetch is the gateway's recheck fetch over a tools.Fetcher, as cmd/citegate wires it.
func liveFetch(f *tools.Fetcher) func(ctx context.Context, url string) (LivePage, error) {
	return func(ctx context.Context, url string) (LivePage, error) {
		p, err := f.FetchLive(ctx, url)
		return LivePage{Text: p.Content, Passages: p.Passages, Full: p.Full}, err
	}
}

// recheckOf returns the recheck object of a preview answer.
func recheckOf(t *testing.T, p map[string]any) map[string]any {
	t.Helper()
	rc, ok := p["recheck"].(map[string]any)
	require.True(t, ok, "no recheck object in %v", p)
	return rc
}

func TestPreviewRecheck(t *testing.T) {
	f := newPreviewFixture(t, true)
	before := time.Now().UTC().Add(-time.Second)
	for _, n := range []int{1, 2} {
		status, _, p := f.preview(t, n, "?recheck=1")
		require.Equal(t, http.StatusOK, status, p)
		assert.Equal(t, false, p["changed"], "unchanged page, citation %d", n)
		rc := recheckOf(t, p)
		assert.Equal(t, "unchanged", rc["status"], rc)
		assert.Equal(t, 1.0, rc["similarity"])
		assert.Equal(t, p["retrievedAt"], rc["retrievedAt"], "the retrieval time comes with the verdict")
		checked, err := time.Parse(time.RFC3339Nano, rc["checkedAt"].(string))
		require.NoError(t, err)
		assert.True(t, checked.After(before), "checkedAt is the time of the recheck")
		assert.NotEmpty(t, rc["detail"])
		assert.NotContains(t, rc, "missing")
	}
	assert.Equal(t, "page", recheckOf(t, mustPreview(t, f, 1))["method"])
	assert.Equal(t, "excerpt", recheckOf(t, mustPreview(t, f, 2))["method"])

	// Whitespace and layout alone are no change for a search excerpt.
	f.site.set("/snippet", "报销制度\n\n  差旅费用应在出差结束后  30 天内\n提交报销申请，逾期需部门负责人审批。\n其他内容。")
	assert.Equal(t, "unchanged", recheckOf(t, mustPreview(t, f, 2))["status"])

	f.site.set("/page", "发票红冲说明\n\n政策已更新：请联系财务部门处理抬头错误。")
	f.site.set("/snippet", "报销制度\n\n差旅费用应在出差结束后 60 天内提交报销申请。")
	p := mustPreview(t, f, 1)
	assert.Equal(t, true, p["changed"])
	assert.Equal(t, f.out.Citations[0].Digest, p["digest"], "the stored digest is reported, not the new one")
	rc := recheckOf(t, p)
	assert.Equal(t, "changed", rc["status"])
	assert.Equal(t, "page", rc["method"])
	assert.Equal(t, 0.5, rc["similarity"], "the heading is still there, the instruction is not")
	assert.Equal(t, "电子发票抬头写错后，应先申请红冲原发票，再按正确抬头重新开具。", rc["missing"])
	assert.Equal(t, "1 of 2 sentences of the excerpt are no longer on the page; 1 new sentences appear.", rc["detail"])

	p = mustPreview(t, f, 2)
	assert.Equal(t, true, p["changed"])
	rc = recheckOf(t, p)
	assert.Equal(t, "changed", rc["status"])
	assert.Equal(t, "excerpt", rc["method"])
	assert.Equal(t, 0.0, rc["similarity"])
	assert.Equal(t, "差旅费用应在出差结束后 30 天内提交报销申请，", rc["missing"])
	assert.Equal(t, "2 of 2 lines of the excerpt are no longer on the page.", rc["detail"])

	// A page that went away: unreachable, with the reason, and no changed verdict.
	f.site.mu.Lock()
	delete(f.site.pages, "/page")
	f.site.mu.Unlock()
	p = mustPreview(t, f, 1)
	assert.NotContains(t, p, "changed")
	rc = recheckOf(t, p)
	assert.Equal(t, "unreachable", rc["status"])
	assert.Contains(t, rc["detail"], "404")
	assert.NotEmpty(t, rc["checkedAt"])
	assert.Equal(t, p["retrievedAt"], rc["retrievedAt"])
	assert.Equal(t, "open_web_page", p["tool"], "the excerpt is still shown")
	assert.NotEmpty(t, p["excerpt"])
}

func TestPreviewRecheckSiteDown(t *testing.T) {
	f := newPreviewFixture(t, true)
	f.siteSrv.Close() // the whole site is gone: connections are refused
	rc := recheckOf(t, mustPreview(t, f, 2))
	assert.Equal(t, "unreachable", rc["status"])
	assert.Contains(t, rc["detail"], "could not be fetched")
}

// mustPreview asks for a recheck of citation n and requires a 200.
func mustPreview(t *testing.T, f *previewFixture, n int) map[string]any {
	t.Helper()
	status, _, p := f.preview(t, n, "?recheck=1")
	require.Equal(t, http.StatusOK, status, p)
	return p
}

func TestPreviewRecheckNotYours(t *testing.T) {
	f := newPreviewFixture(t, true)
	before := f.site.hits.Load()
	_, bobTok := f.e.user("bob")
	for _, q := range []string{"", "?recheck=1"} {
		status, _, body := f.e.do("GET", "/api/messages/"+itoa(int(f.out.FinalMessageID))+"/citations/1/preview"+q, bobTok, nil)
		assert.Equal(t, http.StatusNotFound, status, body)
		assert.JSONEq(t, `{"error":{"code":"not_found","message":"not found"}}`, body)
	}
	assert.Equal(t, before, f.site.hits.Load(), "another user's recheck fetches nothing")
}

// TestPreviewRecheckBundledCorpus cites the bundled knowledge-base documents through the real tools
// (web_search over the corpus, open_web_page through the fetcher) and the real /kb/ handler, then
// rechecks every citation: documents that did not change must say unchanged. It runs with the
// production wiring (the fetcher answers /kb/ URLs in-process) and with a fetcher that reaches the
// pages over HTTP from the /kb/ handler (as for another citegate's knowledge base).
func TestPreviewRecheckBundledCorpus(t *testing.T) {
	docs := []string{"einvoice-title-correction", "annual-leave", "vpn-access"}
	queries := []string{"电子发票抬头开错了怎么办", "年假有多少天", "How do I set up the VPN?"}
	for _, mode := range []string{"in-process", "over HTTP"} {
		t.Run(mode, func(t *testing.T) {
			var kbHits atomic.Int64
			e := newEnv(t, func(c *Config, a *agentCfg) {
				corpus, err := tools.LoadCorpus("", c.PublicURL)
				require.NoError(t, err)
				kb := corpus.Handler()
				c.KB = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					kbHits.Add(1)
					kb.ServeHTTP(w, r)
				})
				withCorpus := corpus
				if mode == "over HTTP" {
					withCorpus = nil
				}
				fetcher, err := tools.NewFetcher(tools.FetchOptions{Allow: []string{"127.0.0.1"}}, withCorpus)
				require.NoError(t, err)
				c.Fetch = liveFetch(fetcher)
				a.Tools = []agent.Tool{tools.NewWebSearch(corpus, nil), tools.NewOpenWebPage(fetcher)}
				a.Model = &scriptedModel{
					calls: func(q string) []store.ToolCall {
						var calls []store.ToolCall
						for i := range docs {
							if q == "open" {
								calls = append(calls, store.ToolCall{ID: "call_" + itoa(i), Name: "open_web_page", Arguments: `{"url":"` + c.PublicURL + `/kb/` + docs[i] + `"}`})
							} else {
								args, _ := json.Marshal(map[string]string{"query": queries[i]})
								calls = append(calls, store.ToolCall{ID: "call_" + itoa(i), Name: "web_search", Arguments: string(args)})
							}
						}
						return calls
					},
					answer: func(string, []string) string {
						var b strings.Builder
						for n := 1; n <= 20; n++ {
							b.WriteString("要点。[^" + itoa(n) + "^]")
						}
						return b.String()
					},
				}
			})
			u, tok := e.user("alice")
			for _, q := range []string{"open", "search"} {
				s := e.session(u, q)
				out := e.runTurn(s.ID, q)
				require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
				if q == "open" {
					require.Len(t, out.Citations, len(docs))
				} else {
					require.GreaterOrEqual(t, len(out.Citations), len(docs))
				}
				for _, c := range out.Citations {
					status, _, body := e.do("GET", "/api/messages/"+itoa(int(out.FinalMessageID))+"/citations/"+itoa(c.N)+"/preview?recheck=1", tok, nil)
					require.Equal(t, http.StatusOK, status, body)
					var p map[string]any
					require.NoError(t, json.Unmarshal([]byte(body), &p))
					rc := recheckOf(t, p)
					assert.Equal(t, "unchanged", rc["status"], "%s %s (%s): %v", q, c.URL, p["tool"], rc)
					assert.Equal(t, false, p["changed"])
					assert.Equal(t, 1.0, rc["similarity"])
				}
			}
			if mode == "over HTTP" {
				assert.Positive(t, kbHits.Load(), "the pages came from the /kb/ handler")
			} else {
				assert.Zero(t, kbHits.Load(), "the production fetcher answers /kb/ in-process")
			}
		})
	}
}

func TestCompareExcerpt(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	live := LivePage{
		Passages: "## 年假天数\n| 累计工作年限 | 法定年假 |\n| --- | --- |\n| 满 1 年不满 10 年 | 5 天 |\n1. Install the client.\n",
		Full:     "年假制度\n年假天数\n累计工作年限\t法定年假\n满 1 年不满 10 年\t5 天\nLine one.\n  The QUICK brown fox\njumps over the lazy dog. 中文 内容。",
	}
	tests := []struct {
		excerpt, status string
		similarity      float64
	}{
		{"## 年假天数\n| 累计工作年限 | 法定年假 |\n| --- | --- |\n| 满 1 年不满 10 年 | 5 天 |", "unchanged", 1},
		{"1. Install the client.", "unchanged", 1},
		{"the quick brown fox jumps", "unchanged", 1},
		{"quick brown … lazy dog", "unchanged", 1},
		{"ＱＵＩＣＫ brown", "unchanged", 1}, // full-width forms fold to ASCII
		{"中文内容", "unchanged", 1},
		{"quick red fox", "changed", 0},
		{"quick brown … lazy cat", "changed", 0.5},
		{"## 年假天数\n| 满 1 年不满 10 年 | 7 天 |", "changed", 0.5},
		{"  \n…", "changed", 0}, // nothing to compare proves nothing
	}
	for _, tc := range tests {
		t.Run(tc.excerpt, func(t *testing.T) {
			rc := compareExcerpt(tc.excerpt, live, at)
			assert.Equal(t, tc.status, rc.Status)
			if rc.Similarity != nil {
				assert.Equal(t, tc.similarity, *rc.Similarity)
			} else {
				assert.Zero(t, tc.similarity)
			}
			assert.Equal(t, at, rc.CheckedAt)
		})
	}
}

func TestComparePage(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	page := "标题\n\n第一句。第二句！\nThird sentence. Fourth one?"
	tests := []struct {
		name, live, status, detail string
		similarity                 float64
	}{
		{"same", page, "unchanged", "The page's text is the same as when it was retrieved.", 1},
		{"whitespace only", "标题\n第一句。 第二句！\n\nThird  sentence.\tFourth one?", "unchanged", "The page's text is the same as when it was retrieved.", 1},
		{"one sentence edited", "标题\n\n第一句。第二句改了！\nThird sentence. Fourth one?", "changed", "1 of 5 sentences of the excerpt are no longer on the page; 1 new sentences appear.", 0.8},
		{"text added", page + "\n新增的一段。", "changed", "0 of 5 sentences of the excerpt are no longer on the page; 1 new sentences appear.", 1},
		{"rearranged", "Third sentence. Fourth one?\n标题\n第一句。第二句！", "changed", "The page's text was rearranged; every sentence of the excerpt is still there.", 1},
		{"emptied", "", "changed", "The page has no readable text any more.", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := comparePage(page, tc.live, at)
			assert.Equal(t, tc.status, rc.Status)
			assert.Equal(t, tc.detail, rc.Detail)
			require.NotNil(t, rc.Similarity)
			assert.Equal(t, tc.similarity, *rc.Similarity)
		})
	}
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

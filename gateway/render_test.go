package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/citations/markdown"
	"github.com/citegate/citegate/store"
)

func TestRenderCacheHitsAndKeys(t *testing.T) {
	c := newRenderCache(1 << 20)
	calls := 0
	render := func(s string) func() string { return func() string { calls++; return s } }
	cits := []citations.Citation{{N: 1, URL: "https://example.com/a", Title: "A"}}
	opt := markdown.Options{Lang: "zh", Anchor: "m1", MessageID: 1}
	k := answerKey("答案[^1^]", cits, nil, opt)

	assert.Equal(t, "x", c.get(k, render("x")))
	assert.Equal(t, "x", c.get(k, render("y")), "the second view is served from the cache")
	assert.Equal(t, 1, calls)

	// Every input the HTML depends on is in the key.
	other := []renderKey{
		answerKey("答案[^1^]。", cits, nil, opt),
		answerKey("答案[^1^]", nil, nil, opt),
		answerKey("答案[^1^]", []citations.Citation{{N: 2, URL: "https://example.com/a", Title: "A"}}, nil, opt),
		answerKey("答案[^1^]", []citations.Citation{{N: 1, URL: "https://example.com/b", Title: "A"}}, nil, opt),
		answerKey("答案[^1^]", []citations.Citation{{N: 1, URL: "https://example.com/a", Title: "B"}}, nil, opt),
		answerKey("答案[^1^]", cits, nil, markdown.Options{Lang: "en", Anchor: "m1", MessageID: 1}),
		answerKey("答案[^1^]", cits, nil, markdown.Options{Lang: "zh", Anchor: "m2", MessageID: 1}),
		answerKey("答案[^1^]", cits, nil, markdown.Options{Lang: "zh", Anchor: "m1"}),
		answerKey("答案[^1^]", cits, []string{"https://example.com/x"}, opt),
		// Length prefixes: moving bytes between fields is a different key.
		answerKey("", []citations.Citation{{N: 1, URL: "https://example.com/a", Title: "A答案[^1^]"}}, nil, opt),
	}
	seen := map[renderKey]bool{k: true}
	for i, o := range other {
		assert.False(t, seen[o], "key %d collides", i)
		seen[o] = true
	}
	// What the renderer does not show does not split the cache.
	fetched := cits[0]
	fetched.Tool, fetched.Digest = "web_search", "sha256:abc"
	assert.Equal(t, k, answerKey("答案[^1^]", []citations.Citation{fetched}, nil, opt))

	var disabled *renderCache = newRenderCache(0)
	assert.Equal(t, "a", disabled.get(k, render("a")))
	assert.Equal(t, "b", disabled.get(k, render("b")), "a disabled cache renders every time")
}

func TestRenderCacheBounded(t *testing.T) {
	const budget = 64 << 10
	c := newRenderCache(budget)
	html := strings.Repeat("h", 4<<10)
	for i := range 200 {
		c.get(answerKey(strings.Repeat("x", i), nil, nil, markdown.Options{}), func() string { return html })
		_, _, bytes, _ := c.stats()
		require.LessOrEqual(t, bytes, budget)
	}
	_, misses, bytes, entries := c.stats()
	assert.EqualValues(t, 200, misses)
	assert.Equal(t, entries*entryCost(html), bytes, "the byte count follows evictions")
	assert.Greater(t, entries, 10)
	// The most recent entry is kept, the oldest is gone.
	calls := 0
	c.get(answerKey(strings.Repeat("x", 199), nil, nil, markdown.Options{}), func() string { calls++; return html })
	assert.Zero(t, calls)
	c.get(answerKey("", nil, nil, markdown.Options{}), func() string { calls++; return html })
	assert.Equal(t, 1, calls)

	// An HTML larger than a quarter of the budget is served but not kept.
	huge := strings.Repeat("H", budget/2)
	k := answerKey("huge", nil, nil, markdown.Options{})
	assert.Equal(t, huge, c.get(k, func() string { return huge }))
	_, _, bytes, _ = c.stats()
	assert.LessOrEqual(t, bytes, budget)
	calls = 0
	c.get(k, func() string { calls++; return huge })
	assert.Equal(t, 1, calls)
}

// TestRenderCacheSingleFlight: readers of an answer that is being rendered wait for that rendering
// instead of starting their own.
func TestRenderCacheSingleFlight(t *testing.T) {
	c := newRenderCache(1 << 20)
	k := answerKey("costly", nil, nil, markdown.Options{})
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	render := func() string {
		if calls.Add(1) == 1 {
			close(started)
			<-release
		}
		return "<p>costly</p>"
	}
	var wg sync.WaitGroup
	results := make([]string, 9)
	wg.Go(func() { results[0] = c.get(k, render) })
	<-started // the first rendering is under way and registered as in flight
	for i := 1; i < len(results); i++ {
		wg.Go(func() { results[i] = c.get(k, render) })
	}
	close(release)
	wg.Wait()
	assert.EqualValues(t, 1, calls.Load(), "one rendering for every reader")
	for _, r := range results {
		assert.Equal(t, "<p>costly</p>", r)
	}
}

// TestRenderCacheFollowsCitations: every view renders from the cache, and a change of the stored
// citations shows at once (the key changes), on the desktop history and on the share page.
func TestRenderCacheFollowsCitations(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "cache")
	e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "问题"})
	answer := e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "甲[^1^]，乙[^2^]。",
		Metadata: json.RawMessage(`{"citations":[{"n":1,"url":"https://example.com/one","title":"One"}]}`)})
	sh := e.createShare(tok, s.ID)

	historyHTML := func() string {
		t.Helper()
		status, _, body := e.do("GET", "/api/sessions/"+s.ID+"/messages", tok, nil)
		require.Equal(t, http.StatusOK, status)
		var doc struct {
			Messages []messageJSON `json:"messages"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &doc))
		require.Len(t, doc.Messages, 2)
		return doc.Messages[1].HTML
	}
	first := historyHTML()
	assert.Contains(t, first, "来源 1")
	assert.NotContains(t, first, "example.com/two")
	page1 := mustGet(t, e, "/s/"+sh.Token, "")
	hits0, misses0, _, _ := e.srv.renders.stats()
	assert.EqualValues(t, 2, misses0, "history and share page render once each (different options)")

	assert.Equal(t, first, historyHTML())
	assert.Equal(t, page1, mustGet(t, e, "/s/"+sh.Token, ""))
	hits1, misses1, _, _ := e.srv.renders.stats()
	assert.Equal(t, misses0, misses1, "repeated views render nothing")
	assert.Equal(t, hits0+2, hits1)

	// The record's citations change: the next view shows them.
	require.NoError(t, e.st.MergeMetadata(t.Context(), answer.ID, map[string]json.RawMessage{
		"citations": json.RawMessage(`[{"n":1,"url":"https://example.com/one","title":"One"},{"n":2,"url":"https://example.com/two","title":"Two"}]`),
	}))
	second := historyHTML()
	assert.Contains(t, second, "来源 2")
	assert.Contains(t, second, "https://example.com/two")
	assert.Contains(t, mustGet(t, e, "/s/"+sh.Token, ""), "https://example.com/two")
}

// pathologicalAnswer is 64 KiB of emphasis delimiters that never close the way goldmark hopes
// (issue 7: ~3 s of CPU per rendering before the cache).
func pathologicalAnswer() string { return strings.Repeat("_a**", 64<<10/4) }

// benchShareSession stores a session with n/2 questions and n/2 answers (answers of about 1.7 KB
// with markers and two sources, like the extractive model's), or, with n == 0, one question and
// the pathological answer; it returns the share token.
func benchShareSession(b *testing.B, e *benchEnv, n int) string {
	b.Helper()
	ctx := b.Context()
	u, _, err := e.st.CreateUser(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	s, err := e.st.CreateSession(ctx, store.Session{UserID: u.ID, Channel: "desktop", Title: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	meta := json.RawMessage(`{"citations":[{"n":1,"url":"https://example.com/a","title":"年假规定"},{"n":2,"url":"https://example.com/b","title":"请假流程"}]}`)
	answer := strings.Repeat("根据**员工手册**，年假天数按工龄计算[^1^]；申请需提前三天在系统提交[^2^]。\n\n- 工龄一年以上：5 天[^1^]\n- 工龄十年以上：10 天[^2^]\n\n", 6)
	add := func(m store.Message) {
		m.SessionID = s.ID
		if _, err := e.st.AppendMessage(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	if n == 0 {
		add(store.Message{Role: store.RoleUser, Content: "q"})
		add(store.Message{Role: store.RoleAssistant, Content: pathologicalAnswer()})
	}
	for i := range n / 2 {
		add(store.Message{Role: store.RoleUser, Content: fmt.Sprintf("第 %d 个问题：年假有几天？", i)})
		add(store.Message{Role: store.RoleAssistant, Content: answer, Metadata: meta})
	}
	wm, err := e.st.LastMessageID(ctx, s.ID)
	if err != nil {
		b.Fatal(err)
	}
	tok, _, err := e.st.CreateShare(ctx, s.ID, u.ID, wm)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}

type benchEnv struct {
	st  *store.Store
	srv *Server
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	st, err := store.Open(filepath.Join(b.TempDir(), "citegate.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ag, err := agent.New(agent.Config{Store: st, Model: &scriptedModel{answer: func(q string, _ []string) string { return q }}})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{Addr: "127.0.0.1:0", Store: st, Agent: ag, Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		srv.Close()
		_ = ag.Close(context.Background())
		_ = st.Close()
	})
	return &benchEnv{st: st, srv: srv}
}

// BenchmarkSharePageView measures one anonymous share-page view (handler CPU, no network) of a
// 200-message chat and of the pathological 64 KiB answer, rendering every time (the code before
// the render cache) and from a warm cache.
func BenchmarkSharePageView(b *testing.B) {
	for _, c := range []struct {
		name string
		n    int
	}{{"200msgs", 200}, {"pathological64KiB", 0}} {
		for _, cached := range []bool{false, true} {
			name := c.name + "/uncached"
			if cached {
				name = c.name + "/cached"
			}
			b.Run(name, func(b *testing.B) {
				e := newBenchEnv(b)
				tok := benchShareSession(b, e, c.n)
				if cached {
					e.srv.renders = newRenderCache(defaultRenderCacheBytes)
				} else {
					e.srv.renders = newRenderCache(0)
				}
				h := e.srv.Handler()
				view := func() {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", "/s/"+tok, nil))
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d", rec.Code)
					}
				}
				view() // warm: the first view renders either way
				b.ReportAllocs()
				b.ResetTimer()
				before := processCPU()
				for b.Loop() {
					view()
				}
				// The machine these run on is shared; CPU time per view is the figure that does
				// not grow with other processes' load (wall time per view does).
				b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "cpu-ms/op")
			})
		}
	}
}

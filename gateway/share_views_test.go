package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// listedShare is one entry of GET /api/shares as a client reads it.
type listedShare struct {
	shareJSON
	Title string `json:"title"`
	Own   bool   `json:"own"`
}

func (e *testEnv) listShares(tok string) []listedShare {
	e.t.Helper()
	var out struct {
		Shares []listedShare `json:"shares"`
	}
	require.NoError(e.t, json.Unmarshal([]byte(mustGet(e.t, e, "/api/shares", tok)), &out))
	return out.Shares
}

func (e *testEnv) getWith(path string, hdr map[string]string, method string) int {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, nil)
	require.NoError(e.t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	require.NoError(e.t, err)
	// Read to the end: the page counts as viewed before its end is sent.
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(e.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// withViewFlush sets how long views wait before they are written.
func withViewFlush(d time.Duration) envOpt {
	return func(c *Config, _ *agentCfg) { c.ShareViewFlush = d }
}

// TestShareViewsCounted: page views by others count, in parallel without losing any; HEAD,
// prefetches, the download, the owner's own look and a revoked link do not. The list shows views
// and the last view's time, and what the link covers.
func TestShareViewsCounted(t *testing.T) {
	clock := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	e := newEnv(t, withViewFlush(time.Hour), func(c *Config, _ *agentCfg) { c.Now = func() time.Time { return clock } })
	u, tok := e.user("alice")
	_, bobTok := e.user("bob")
	s := e.session(u, "年假")
	require.Equal(t, store.PhaseCompleted, e.runTurn(s.ID, "年假有几天").Phase)
	sh := e.createShare(tok, s.ID)
	assert.Equal(t, 2, sh.Messages, "the question and the answer")
	require.NotNil(t, sh.WatermarkAt)
	assert.Zero(t, sh.Views)
	assert.Nil(t, sh.LastViewedAt)

	const workers, each = 16, 5
	var wg sync.WaitGroup
	var bad atomic.Int32
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := http.Get(e.ts.URL + "/s/" + sh.Token)
				if err != nil {
					bad.Add(1)
					continue
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
					bad.Add(1)
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	require.Zero(t, bad.Load())
	// What does not count.
	assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, nil, http.MethodHead))
	assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, map[string]string{"Sec-Purpose": "prefetch;prerender"}, http.MethodGet))
	assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, map[string]string{"Purpose": "prefetch"}, http.MethodGet))
	assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token+"/export.jsonl", nil, http.MethodGet))
	assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, map[string]string{"Authorization": "Bearer " + tok}, http.MethodGet), "the owner")
	// Another signed-in user is a reader like any other.
	assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, map[string]string{"Authorization": "Bearer " + bobTok}, http.MethodGet))

	// Nothing was written yet (the interval is an hour); the list flushes first.
	stored, err := e.st.GetShare(context.Background(), sh.Token)
	require.NoError(t, err)
	assert.Zero(t, stored.Views, "views are batched, not written per request")
	list := e.listShares(tok)
	require.Len(t, list, 1)
	assert.Equal(t, uint64(workers*each+1), list[0].Views)
	require.NotNil(t, list[0].LastViewedAt)
	assert.True(t, clock.Equal(*list[0].LastViewedAt))
	assert.Equal(t, 2, list[0].Messages)
	assert.Equal(t, "年假", list[0].Title)

	// The raw JSON names the fields the view reads.
	raw := mustGet(t, e, "/api/shares", tok)
	for _, k := range []string{`"views":81`, `"lastViewedAt":"2026-12-01T09:30:00Z"`, `"messages":2`, `"watermarkAt":`} {
		assert.Contains(t, raw, k)
	}

	// A revoked link: 404 and no count, now or later.
	status, _, _ := e.do("DELETE", "/api/shares/"+sh.Token, tok, nil)
	require.Equal(t, http.StatusNoContent, status)
	assert.Equal(t, http.StatusNotFound, e.getWith("/s/"+sh.Token, nil, http.MethodGet))
	e.srv.flushViews(context.Background())
	_, err = e.st.GetShare(context.Background(), sh.Token)
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.Empty(t, e.listShares(tok))
	assert.Equal(t, float64(workers*each+1), testutilCounter(t, e.reg, "citegate_share_views_total"))
}

// testutilCounter reads a counter without labels from reg.
func testutilCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestShareViewsWrittenByTimer: without anyone listing, the batch is written after the interval.
func TestShareViewsWrittenByTimer(t *testing.T) {
	e := newEnv(t, withViewFlush(20*time.Millisecond))
	u, tok := e.user("alice")
	s := e.session(u, "t")
	e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "q"})
	sh := e.createShare(tok, s.ID)
	for range 3 {
		assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, nil, http.MethodGet))
	}
	deadline := time.Now().Add(20 * time.Second) // bounds a hang only
	for {
		got, err := e.st.GetShare(context.Background(), sh.Token)
		require.NoError(t, err)
		if got.Views == 3 {
			break
		}
		require.True(t, time.Now().Before(deadline), "views not written by the timer: %d", got.Views)
		time.Sleep(10 * time.Millisecond)
	}
}

// failingViews is the real store whose AddShareViews fails while fail is set.
type failingViews struct {
	Store
	fail  atomic.Bool
	calls atomic.Int32
}

func (f *failingViews) AddShareViews(ctx context.Context, v []store.ShareViews) error {
	f.calls.Add(1)
	if f.fail.Load() {
		return errors.New("disk full")
	}
	return f.Store.AddShareViews(ctx, v)
}

// TestShareViewsKeptWhenTheWriteFails: a failed batch is kept and written by the next flush, so no
// view is lost to a store hiccup.
func TestShareViewsKeptWhenTheWriteFails(t *testing.T) {
	var fv *failingViews
	e := newEnv(t, withViewFlush(time.Hour), func(c *Config, _ *agentCfg) {
		fv = &failingViews{Store: c.Store}
		c.Store = fv
	})
	u, tok := e.user("alice")
	s := e.session(u, "t")
	e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "q"})
	sh := e.createShare(tok, s.ID)
	fv.fail.Store(true)
	for range 4 {
		assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, nil, http.MethodGet))
	}
	require.Error(t, e.srv.views.flush(context.Background()))
	assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, nil, http.MethodGet))
	require.Error(t, e.srv.views.flush(context.Background()))
	fv.fail.Store(false)
	list := e.listShares(tok)
	require.Len(t, list, 1)
	assert.Equal(t, uint64(5), list[0].Views, "both failed batches arrive")
	assert.Equal(t, int32(3), fv.calls.Load())
}

// TestShareUpdateOffer: the chat's links with "newer" once it grew; an update moves the same link
// forward (the page then shows the newer messages) and keeps its views; sharing again hands back
// the updated link; strangers and bad bodies are refused.
func TestShareUpdateOffer(t *testing.T) {
	e := newEnv(t, withViewFlush(time.Hour))
	u, tok := e.user("alice")
	_, bobTok := e.user("bob")
	s := e.session(u, "年假")
	require.Equal(t, store.PhaseCompleted, e.runTurn(s.ID, "第一个问题").Phase)

	type chatShares struct {
		Shares []struct {
			shareJSON
			Newer bool `json:"newer"`
		} `json:"shares"`
		Latest uint64 `json:"latest"`
	}
	get := func() chatShares {
		t.Helper()
		var out chatShares
		require.NoError(t, json.Unmarshal([]byte(mustGet(t, e, "/api/sessions/"+s.ID+"/shares", tok)), &out))
		return out
	}
	none := get()
	assert.Empty(t, none.Shares)
	assert.NotZero(t, none.Latest)

	sh := e.createShare(tok, s.ID)
	cur := get()
	require.Len(t, cur.Shares, 1)
	assert.Equal(t, sh.Token, cur.Shares[0].Token)
	assert.False(t, cur.Shares[0].Newer)
	assert.Equal(t, http.StatusOK, e.getWith("/s/"+sh.Token, nil, http.MethodGet)) // one view

	require.Equal(t, store.PhaseCompleted, e.runTurn(s.ID, "后来的追问XYZ").Phase)
	grown := get()
	require.Len(t, grown.Shares, 1)
	assert.True(t, grown.Shares[0].Newer, "the chat has messages the link does not show")
	assert.Greater(t, grown.Latest, sh.Watermark)
	_, _, page := e.do("GET", "/s/"+sh.Token, "", nil)
	assert.NotContains(t, page, "后来的追问XYZ")

	patch := func(ref, tok, body string) (int, string) {
		t.Helper()
		status, _, out := e.do("PATCH", "/api/shares/"+ref, tok, strings.NewReader(body))
		return status, out
	}
	status, body := patch(sh.Token, bobTok, `{"watermark":"latest"}`)
	assert.Equal(t, http.StatusNotFound, status, "someone else's link: "+body)
	status, _ = patch(sh.ID, bobTok, `{"watermark":"latest"}`)
	assert.Equal(t, http.StatusNotFound, status)
	status, body = patch(sh.Token, tok, `{"watermark":5}`)
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, _ = patch(sh.Token, tok, `not json`)
	assert.Equal(t, http.StatusBadRequest, status)
	status, _ = patch("no-such-token", tok, `{"watermark":"latest"}`)
	assert.Equal(t, http.StatusNotFound, status)

	status, body = patch(sh.Token, tok, `{"watermark":"latest"}`)
	require.Equal(t, http.StatusOK, status, body)
	var up shareJSON
	require.NoError(t, json.Unmarshal([]byte(body), &up))
	assert.Equal(t, sh.Token, up.Token, "the same link")
	assert.Equal(t, sh.URL, up.URL)
	assert.Equal(t, grown.Latest, up.Watermark)
	assert.Equal(t, 4, up.Messages)
	assert.Equal(t, uint64(1), up.Views, "views are kept")
	_, _, page = e.do("GET", "/s/"+sh.Token, "", nil)
	assert.Contains(t, page, "后来的追问XYZ", "the link now shows the newer messages")
	after := get()
	require.Len(t, after.Shares, 1)
	assert.False(t, after.Shares[0].Newer)

	// By id works too, and an update with nothing newer changes nothing.
	status, body = patch(sh.ID, tok, `{"watermark":"latest"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &up))
	assert.Equal(t, sh.Token, up.Token, "the token is found for an update by id")
	assert.Equal(t, grown.Latest, up.Watermark)

	// The old API: sharing the chat as it is now hands back the updated link (200).
	status, _, body = e.do("POST", "/api/sessions/"+s.ID+"/shares", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	var again shareJSON
	require.NoError(t, json.Unmarshal([]byte(body), &again))
	assert.Equal(t, sh.Token, again.Token)

	// Someone else's chat: 404 like a missing one.
	status, _, _ = e.do("GET", "/api/sessions/"+s.ID+"/shares", bobTok, nil)
	assert.Equal(t, http.StatusNotFound, status)
}

// boundedStore is the real store that records how the share page reads messages: never the whole
// session at once, only pages of at most exportPage.
type boundedStore struct {
	Store
	whole   atomic.Int32
	pages   atomic.Int32
	maxPage atomic.Int32
}

func (b *boundedStore) ListMessages(ctx context.Context, sessionID string) ([]store.Message, error) {
	b.whole.Add(1)
	return b.Store.ListMessages(ctx, sessionID)
}

func (b *boundedStore) ListMessagesAfter(ctx context.Context, sessionID string, afterID uint64, limit int) ([]store.Message, error) {
	b.pages.Add(1)
	out, err := b.Store.ListMessagesAfter(ctx, sessionID, afterID, limit)
	for {
		cur := b.maxPage.Load()
		if int32(len(out)) <= cur || b.maxPage.CompareAndSwap(cur, int32(len(out))) {
			break
		}
	}
	return out, err
}

// TestSharePageAndExportReadInPages: a long shared chat is rendered and exported from pages of the
// session, never from one read of all of it; both stop at the watermark and show what they showed
// when read at once (every question and answer, no tool traffic).
func TestSharePageAndExportReadInPages(t *testing.T) {
	var bs *boundedStore
	e := newEnv(t, withViewFlush(time.Hour), func(c *Config, _ *agentCfg) {
		bs = &boundedStore{Store: c.Store}
		c.Store = bs
	})
	u, tok := e.user("alice")
	s := e.session(u, "长对话")
	const turns = 200 // 4 messages a turn: 800 messages, a few pages
	for i := range turns {
		e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprintf("问题%04d", i)})
		e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "web_search", Arguments: `{"query":"秘密参数"}`}}})
		e.append(store.Message{SessionID: s.ID, Role: store.RoleTool, ToolCallID: "c", ToolName: "web_search", Content: "工具结果不公开"})
		e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: fmt.Sprintf("回答%04d", i)})
	}
	sh := e.createShare(tok, s.ID)
	assert.Equal(t, 2*turns, sh.Messages)
	e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "水位之后"})

	bs.whole.Store(0)
	bs.pages.Store(0)
	page := mustGet(t, e, "/s/"+sh.Token, "")
	assert.Zero(t, bs.whole.Load(), "the share page never reads the whole session")
	assert.GreaterOrEqual(t, bs.pages.Load(), int32(4*turns/exportPage), "it reads page by page")
	assert.LessOrEqual(t, bs.maxPage.Load(), int32(exportPage))
	assert.Equal(t, 2*turns, strings.Count(page, `<article class="msg `))
	assert.Contains(t, page, "问题0000")
	assert.Contains(t, page, "回答0199")
	assert.NotContains(t, page, "水位之后")
	assert.NotContains(t, page, "工具结果不公开")
	assert.True(t, strings.HasSuffix(strings.TrimSpace(page), "</html>"), "the page is complete")
	assert.Less(t, strings.Index(page, "问题0001"), strings.Index(page, "问题0002"), "in order")

	bs.whole.Store(0)
	bs.pages.Store(0)
	lines := parseJSONL(t, mustGet(t, e, "/s/"+sh.Token+"/export.jsonl", ""))
	assert.Zero(t, bs.whole.Load(), "the share export never reads the whole session")
	assert.GreaterOrEqual(t, bs.pages.Load(), int32(4*turns/exportPage))
	assert.Len(t, lines, 2*turns)
	for _, l := range lines {
		assert.LessOrEqual(t, uint64(l["id"].(float64)), sh.Watermark)
		assert.NotContains(t, l["content"], "工具结果不公开")
	}
}

// An empty snapshot still renders the empty notice (the streamed page ends properly).
func TestSharePageStreamsEmptyNotice(t *testing.T) {
	e := newEnv(t)
	u, _ := e.user("alice")
	s := e.session(u, "t")
	m := e.append(store.Message{SessionID: s.ID, Role: store.RoleTool, ToolCallID: "c", ToolName: "web_search", Content: "x"})
	tk, _, _, err := e.st.ShareSession(context.Background(), s.ID, u.ID, m.ID)
	require.NoError(t, err)

	page := mustGet(t, e, "/s/"+tk, "")
	assert.Contains(t, page, `<p class="empty">`)
	assert.True(t, strings.HasSuffix(strings.TrimSpace(page), "</html>"))
}

package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// readCountingStore counts the message reads of the gateway: whole-session reads and pages, with
// the largest page asked for.
type readCountingStore struct {
	Store
	mu          sync.Mutex
	whole       int // ListMessages calls
	after       int // ListMessagesAfter calls
	dialog      int // ListDialogBefore calls
	maxLimit    int
	maxReturned int
}

func (c *readCountingStore) ListMessages(ctx context.Context, sessionID string) ([]store.Message, error) {
	c.mu.Lock()
	c.whole++
	c.mu.Unlock()
	return c.Store.ListMessages(ctx, sessionID)
}

func (c *readCountingStore) page(limit, n int) {
	c.maxLimit = max(c.maxLimit, limit)
	c.maxReturned = max(c.maxReturned, n)
}

func (c *readCountingStore) ListMessagesAfter(ctx context.Context, sessionID string, afterID uint64, limit int) ([]store.Message, error) {
	out, err := c.Store.ListMessagesAfter(ctx, sessionID, afterID, limit)
	c.mu.Lock()
	c.after++
	c.page(limit, len(out))
	c.mu.Unlock()
	return out, err
}

func (c *readCountingStore) ListDialogBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]store.Message, error) {
	out, err := c.Store.ListDialogBefore(ctx, sessionID, beforeID, limit)
	c.mu.Lock()
	c.dialog++
	c.page(limit, len(out))
	c.mu.Unlock()
	return out, err
}

func (c *readCountingStore) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.whole, c.after, c.dialog, c.maxLimit, c.maxReturned = 0, 0, 0, 0, 0
}

// TestMarkdownExportStreamsPages exports a session several pages long and checks that the export
// reads it a bounded page at a time (never the whole session) and writes exactly what the
// whole-session implementation it replaced wrote (markdownOfWholeSession below).
func TestMarkdownExportStreamsPages(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	var counting *readCountingStore
	e := newEnv(t, func(c *Config, _ *agentCfg) {
		c.Now = func() time.Time { return now }
		counting = &readCountingStore{Store: c.Store}
		c.Store = counting
	})
	alice, tok := e.user("alice")
	sess := e.session(alice, "长会话 *导出*")
	ctx := context.Background()
	// 300 turns: question, a tool call with its result, and an answer with citations, links and
	// feedback of every kind; some answers interrupted, some questions regenerated or edited.
	const turns = 300
	for i := range turns {
		userMeta := json.RawMessage(nil)
		switch i % 7 {
		case 3:
			userMeta = json.RawMessage(`{"regenerateOf":1}`)
		case 5:
			userMeta = json.RawMessage(`{"editOf":1}`)
		}
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprintf("第 %d 个问题 [链接](https://x.example/%d)\n", i, i), Metadata: userMeta})
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "web_search", Arguments: `{"query":"q"}`}}})
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleTool, ToolCallID: "c", ToolName: "web_search", Content: searchResult("q", [3]string{"来源", "https://example.com/a", "内容"})})
		meta := map[string]any{
			"citations": []citations.Citation{{N: 1, URL: "https://example.com/a", Title: "来源 *一*"}, {N: 3, URL: "https://kb.example/a b"}},
			"links":     map[string]any{"hidden": 1, "allowed": []string{"https://ok.example/"}},
		}
		if i%4 == 1 {
			meta["feedback"] = map[string]any{"vote": []string{"up", "down"}[i%2], "comment": "评论\n第二行 _x_", "by": alice.ID, "at": now}
		}
		if i%9 == 2 {
			meta["interrupted"] = true
		}
		raw, err := json.Marshal(meta)
		require.NoError(t, err)
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Metadata: raw,
			Content: fmt.Sprintf("回答 %d[^1^][^3^][^9^]，见 https://ok.example/ 与 https://evil.example/%d 。`[^1^]`", i, i)})
	}
	all, err := e.st.ListMessages(ctx, sess.ID)
	require.NoError(t, err)
	require.Len(t, all, 4*turns)
	for _, lang := range []string{"zh", "en"} {
		want := markdownOfWholeSession(sess, all, lang, now)
		counting.reset()
		status, _, body := e.do("GET", "/api/sessions/"+sess.ID+"/export.md?lang="+lang, tok, nil)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, want, body, "the streamed export writes what the whole-session export wrote")
		assert.Contains(t, body, fmt.Sprintf("· %d ", 2*turns))
		assert.NotContains(t, body, "evil.example")
		counting.mu.Lock()
		assert.Zero(t, counting.whole, "the export never reads the whole session")
		assert.LessOrEqual(t, counting.maxLimit, exportPage)
		assert.LessOrEqual(t, counting.maxReturned, exportPage)
		// 1200 messages are 5 pages forward; 600 visible ones are 3 pages of the dialog index.
		assert.Equal(t, (4*turns+exportPage-1)/exportPage, counting.after)
		assert.Equal(t, (2*turns+exportPage-1)/exportPage, counting.dialog)
		counting.mu.Unlock()
	}

	// A session with nothing in it has the header alone, and reads no page at all.
	empty := e.session(alice, "")
	counting.reset()
	status, _, body := e.do("GET", "/api/sessions/"+empty.ID+"/export.md?lang=en", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, markdownOfWholeSession(empty, nil, "en", now), body)
	assert.Equal(t, "# citegate\n\ncitegate · exported 2026-12-01 03:00 UTC · 0 messages\n", body)
	assert.Zero(t, counting.after+counting.dialog+counting.whole)
}

// markdownOfWholeSession is the Markdown export as it was written before it streamed: over the
// whole session held in memory. It is kept, verbatim but for its name, as the reference the
// streamed export must match byte for byte.
func writeMarkdownWhole(b *bufio.Writer, sess store.Session, msgs []store.Message, lang string, now time.Time) {
	lb := mdLabelsFor(lang)
	title := strings.TrimSpace(sess.Title)
	if title == "" {
		title = "citegate"
	}
	visibleCount := 0
	for _, m := range msgs {
		if visible(m) {
			visibleCount++
		}
	}
	b.WriteString("# " + mdEscape(title) + "\n\n")
	b.WriteString("citegate · " + lb.exported + " " + mdTime(now) + " · " + strconv.Itoa(visibleCount) + " " + lb.messages + "\n")
	for _, m := range msgs {
		if !visible(m) {
			continue
		}
		am := readActionMeta(m.Metadata)
		b.WriteString("\n---\n\n")
		if m.Role == store.RoleUser {
			head := lb.user
			switch {
			case am.RegenerateOf != 0:
				head += " · " + lb.regenerated
			case am.EditOf != 0:
				head += " · " + lb.edited
			}
			b.WriteString("### " + head + " · " + mdTime(m.CreatedAt) + "\n\n")
			b.WriteString(strings.TrimRight(m.Content, " \t\n") + "\n")
			continue
		}
		b.WriteString("### " + lb.assistant + " · " + mdTime(m.CreatedAt) + "\n\n")
		cits := citations.FromMetadata(m.Metadata)
		b.WriteString(answerBody(m.Content, cits, linkAllowList(m.Metadata, cits), superNumber, ",") + "\n")
		if interrupted(m.Metadata) {
			b.WriteString("\n*" + lb.interrupted + "*\n")
		}
		if len(cits) > 0 {
			b.WriteString("\n**" + sourcesLabel(lang) + "**\n\n")
			display := citations.DisplayNumbers(cits)
			for _, c := range cits {
				t := strings.TrimSpace(c.Title)
				if t == "" {
					t = c.URL
				}
				b.WriteString(strconv.Itoa(display[c.N]) + ". [" + mdEscape(t) + "](<" + mdURL(c.URL) + ">)\n")
			}
		}
		if fb := am.Feedback; fb != nil && (fb.Vote == voteUp || fb.Vote == voteDown) {
			verdict := lb.helpful
			if fb.Vote == voteDown {
				verdict = lb.unhelpful
			}
			line := lb.feedback + ": " + verdict
			if fb.Comment != "" {
				line += " — " + mdEscape(strings.Join(strings.Fields(fb.Comment), " "))
			}
			b.WriteString("\n*" + line + "*\n")
		}
	}
}

func markdownOfWholeSession(sess store.Session, msgs []store.Message, lang string, now time.Time) string {
	var buf bytes.Buffer
	b := bufio.NewWriter(&buf)
	writeMarkdownWhole(b, sess, msgs, lang, now)
	_ = b.Flush()
	return buf.String()
}

// discardWriter is a ResponseWriter that keeps nothing, so a benchmark measures the export and
// not a recorder's copy of the body.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkMarkdownExport compares the streamed Markdown export (pages of the store, the handler
// itself) with the whole-session export it replaced (ListMessages, then the old writer), on a
// session of 4,000 messages. Figures in docs/benchmarks.md.
func BenchmarkMarkdownExport(b *testing.B) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	st, err := store.Open(b.TempDir()+"/citegate.db", store.Options{})
	require.NoError(b, err)
	defer st.Close()
	ctx := context.Background()
	u, _, err := st.CreateUser(ctx, "alice")
	require.NoError(b, err)
	sess, err := st.CreateSession(ctx, store.Session{UserID: u.ID, Channel: "desktop", Title: "长会话"})
	require.NoError(b, err)
	meta, err := json.Marshal(map[string]any{"citations": []citations.Citation{{N: 1, URL: "https://example.com/a", Title: "来源"}}})
	require.NoError(b, err)
	tool := searchResult("q", [3]string{"来源", "https://example.com/a", strings.Repeat("内容", 400)})
	const turns = 1000
	for i := range turns {
		for _, m := range []store.Message{
			{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprintf("第 %d 个问题", i)},
			{SessionID: sess.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "web_search", Arguments: `{"query":"q"}`}}},
			{SessionID: sess.ID, Role: store.RoleTool, ToolCallID: "c", ToolName: "web_search", Content: tool},
			{SessionID: sess.ID, Role: store.RoleAssistant, Content: fmt.Sprintf("回答 %d[^1^]。", i) + strings.Repeat("正文。", 100), Metadata: meta},
		} {
			_, err := st.AppendMessage(ctx, m)
			require.NoError(b, err)
		}
	}
	ag, err := agent.New(agent.Config{Store: st, Model: &scriptedModel{answer: func(q string, _ []string) string { return q }}})
	require.NoError(b, err)
	defer func() { _ = ag.Close(ctx) }()
	srv, err := New(Config{Addr: "127.0.0.1:0", PublicURL: "http://127.0.0.1", DataDir: b.TempDir(), Store: st,
		Agent: ag, Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }})
	require.NoError(b, err)
	defer srv.Close()
	req := httptest.NewRequest("GET", "/api/sessions/"+sess.ID+"/export.md?lang=zh", nil)
	req.SetPathValue("id", sess.ID)
	measure := measureCPUAndPeakHeap // CPU per export and the peak heap while exporting
	b.Run("streamed", func(b *testing.B) {
		measure(b, func() {
			if err := srv.handleExportMarkdown(&discardWriter{h: http.Header{}}, req, u); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("whole", func(b *testing.B) {
		measure(b, func() {
			msgs, err := st.ListMessages(ctx, sess.ID)
			if err != nil {
				b.Fatal(err)
			}
			bw := bufio.NewWriterSize(&discardWriter{h: http.Header{}}, 32<<10)
			writeMarkdownWhole(bw, sess, msgs, "zh", now)
			_ = bw.Flush()
		})
	})
}

// measureCPUAndPeakHeap runs fn b.N times and reports, besides time and allocations, the process CPU
// time per op (the machine is shared, wall time is not a fair comparison) and the peak heap while
// fn runs above the heap before (sampled every millisecond, so approximate).
func measureCPUAndPeakHeap(b *testing.B, fn func()) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > base && m.HeapAlloc-base > peak.Load() {
					peak.Store(m.HeapAlloc - base)
				}
			}
		}
	}()
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		fn()
	}
	used := processCPU() - cpu
	close(stop)
	<-sampled
	b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(peak.Load()), "peak-heap-B")
}

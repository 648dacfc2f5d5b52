package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent/openaimodel"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

var testNow = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func testLogger(t *testing.T) *slog.Logger { return discardLogger() }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openStore opens a real bbolt store in a temp dir.
func openStore(t *testing.T) *store.Store { return openStoreTB(t) }

func openStoreTB(tb testing.TB) *store.Store {
	tb.Helper()
	st, err := store.Open(filepath.Join(tb.TempDir(), "citegate.db"), store.Options{Now: func() time.Time { return testNow }})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

func newSession(t *testing.T, st *store.Store) string { return newSessionTB(t, st) }

func newSessionTB(tb testing.TB, st *store.Store) string {
	tb.Helper()
	s, err := st.CreateSession(context.Background(), store.Session{UserID: "u1", Channel: "desktop"})
	require.NoError(tb, err)
	return s.ID
}

func newAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return testNow }
	}
	a, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a
}

// run submits one turn and waits for its outcome.
func run(t *testing.T, a *Agent, sessionID, text string, sink Sink) Outcome {
	t.Helper()
	h, err := a.Submit(context.Background(), Turn{SessionID: sessionID, Text: text, Channel: "desktop", Sink: sink})
	require.NoError(t, err)
	return wait(t, h)
}

func wait(t *testing.T, h *RunHandle) Outcome {
	t.Helper()
	select {
	case <-h.Done():
		return h.Outcome()
	case <-time.After(20 * time.Second):
		t.Fatalf("run %s did not finish", h.ID)
		return Outcome{}
	}
}

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []Event
	// on, when set, is called for every event (in the run goroutine).
	on func(Event)
}

func (r *recorder) sink(ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	on := r.on
	r.mu.Unlock()
	if on != nil {
		on(ev)
	}
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

func (r *recorder) ofRun(runID string) []Event {
	var out []Event
	for _, ev := range r.all() {
		if ev.RunID == runID {
			out = append(out, ev)
		}
	}
	return out
}

func types(evs []Event) []EventType {
	out := make([]EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// checkEventOrder asserts DESIGN §5's per-run order: run.started first; tool and delta events;
// answer.final at most once; citations at most once and after answer.final; run.finished last.
func checkEventOrder(t *testing.T, evs []Event) {
	t.Helper()
	require.NotEmpty(t, evs)
	require.Equal(t, EventRunStarted, evs[0].Type, "first event: %v", types(evs))
	require.Equal(t, EventRunFinished, evs[len(evs)-1].Type, "last event: %v", types(evs))
	stage := 0 // 0 streaming, 1 after answer.final, 2 after citations
	for _, ev := range evs[1 : len(evs)-1] {
		switch ev.Type {
		case EventToolStarted, EventToolFinished, EventAnswerDelta:
			require.Equal(t, 0, stage, "%s after the final answer: %v", ev.Type, types(evs))
		case EventAnswerFinal:
			require.Equal(t, 0, stage, "second answer.final: %v", types(evs))
			stage = 1
		case EventCitations:
			require.Equal(t, 1, stage, "citations not right after answer.final: %v", types(evs))
			stage = 2
		default:
			t.Fatalf("unexpected %s inside the run: %v", ev.Type, types(evs))
		}
	}
	for _, ev := range evs {
		require.NotEmpty(t, ev.RunID)
		require.NotEmpty(t, ev.SessionID)
	}
}

// finalRoundDeltas returns the delta texts after the last tool.finished.
func finalRoundDeltas(evs []Event) []string {
	var out []string
	for _, ev := range evs {
		switch ev.Type {
		case EventToolFinished:
			out = nil
		case EventAnswerDelta:
			out = append(out, ev.Text)
		}
	}
	return out
}

// checkDeltas asserts that no delta holds a marker and that no delta but a round's last one ends
// with what could still become a marker.
func checkDeltas(t *testing.T, evs []Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Type != EventAnswerDelta {
			continue
		}
		require.Empty(t, citations.Extract(ev.Text), "delta %q holds a marker", ev.Text)
		require.NotEmpty(t, ev.Text)
		lastOfRound := i+1 < len(evs) && evs[i+1].Type != EventAnswerDelta
		if !lastOfRound {
			require.False(t, endsWithMarkerPrefix(ev.Text), "delta %q ends with part of a marker", ev.Text)
		}
	}
}

func endsWithMarkerPrefix(s string) bool {
	i := strings.LastIndexByte(s, '[')
	if i < 0 {
		return false
	}
	tail := s[i:]
	if tail == "[" {
		return true
	}
	if !strings.HasPrefix(tail, "[^") {
		return false
	}
	rest := strings.TrimPrefix(tail, "[^")
	rest = strings.TrimLeft(rest, "0123456789")
	return rest == "" || rest == "^"
}

// --- test tools -------------------------------------------------------------------------------

type funcTool struct {
	name string
	fn   func(ctx context.Context, args string) (string, error)
}

func (f funcTool) Spec() ToolSpec {
	return ToolSpec{Name: f.name, Description: "test tool " + f.name,
		Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},"url":{"type":"string"}}}`)}
}

func (f funcTool) Call(ctx context.Context, args string) (string, error) { return f.fn(ctx, args) }

type hit struct{ title, url, content string }

// searchJSON is the DESIGN §4 web_search success shape.
func searchJSON(query string, hits ...hit) string {
	type result struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	}
	rs := make([]result, 0, len(hits))
	for _, h := range hits {
		rs = append(rs, result{h.title, h.url, h.content})
	}
	b, _ := json.Marshal(map[string]any{"query": query, "results": rs, "total_results": len(rs)})
	return string(b)
}

func pageJSON(u, title, content string) string {
	b, _ := json.Marshal(map[string]any{"url": u, "title": title, "content": content, "content_length": len(content), "truncated": false})
	return string(b)
}

// searchTool answers every query with hits; calls counts how often it ran.
func searchTool(hits ...hit) (Tool, *int) {
	var mu sync.Mutex
	calls := new(int)
	return funcTool{name: "web_search", fn: func(ctx context.Context, args string) (string, error) {
		var a struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return "", err
		}
		mu.Lock()
		*calls++
		mu.Unlock()
		return searchJSON(a.Query, hits...), nil
	}}, calls
}

func pageTool(pages map[string]hit) Tool {
	return funcTool{name: "open_web_page", fn: func(ctx context.Context, args string) (string, error) {
		var a struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return "", err
		}
		p, ok := pages[a.URL]
		if !ok {
			b, _ := json.Marshal(map[string]string{"error": "page not found", "url": a.URL})
			return string(b), nil
		}
		return pageJSON(p.url, p.title, p.content), nil
	}}
}

// --- scripted OpenAI-compatible server ---------------------------------------------------------

// reply is one scripted answer of the fake /chat/completions endpoint.
type reply struct {
	status     int    // non-zero: answer with this status and body instead of a stream
	body       string // error body
	retryAfter string
	chunks     []string      // SSE data payloads
	hold       chan struct{} // when set, the stream stalls after chunks until closed or the client leaves
	noDone     bool          // end the stream without [DONE]
}

type fakeLLM struct {
	t        *testing.T
	mu       sync.Mutex
	replies  []reply
	requests []map[string]any
	headers  []http.Header
	srv      *httptest.Server
}

func newFakeLLM(t *testing.T, replies ...reply) *fakeLLM {
	f := &fakeLLM{t: t, replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) push(rs ...reply) {
	f.mu.Lock()
	f.replies = append(f.replies, rs...)
	f.mu.Unlock()
}

func (f *fakeLLM) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, body)
	f.headers = append(f.headers, r.Header.Clone())
	if len(f.replies) == 0 {
		f.mu.Unlock()
		http.Error(w, `{"error":{"message":"script exhausted"}}`, http.StatusTeapot)
		return
	}
	rep := f.replies[0]
	f.replies = f.replies[1:]
	f.mu.Unlock()

	if rep.status != 0 {
		if rep.retryAfter != "" {
			w.Header().Set("Retry-After", rep.retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
		return
	}
	if body["stream"] != true {
		http.Error(w, `{"error":{"message":"expected stream: true"}}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for _, c := range rep.chunks {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", c); err != nil {
			return
		}
		fl.Flush()
	}
	if rep.hold != nil {
		select {
		case <-rep.hold:
		case <-r.Context().Done():
			return
		}
	}
	if !rep.noDone {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		fl.Flush()
	}
}

func (f *fakeLLM) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// request returns the i-th request body.
func (f *fakeLLM) request(i int) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Less(f.t, i, len(f.requests))
	return f.requests[i]
}

// messages returns the messages of the i-th request.
func (f *fakeLLM) messages(i int) []map[string]any {
	raw := f.request(i)["messages"].([]any)
	out := make([]map[string]any, len(raw))
	for j, m := range raw {
		out[j] = m.(map[string]any)
	}
	return out
}

func (f *fakeLLM) model(t *testing.T) Model {
	m, err := openaimodel.New(openaimodel.Config{BaseURL: f.srv.URL + "/v1", Model: "test-model", APIKey: "sk-test-secret", Backoff: time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	return m
}

func chunk(delta map[string]any, finish any) string {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
	})
	return string(b)
}

// textStream streams parts as content deltas and finishes with "stop".
func textStream(parts ...string) reply {
	var cs []string
	cs = append(cs, chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, p := range parts {
		cs = append(cs, chunk(map[string]any{"content": p}, nil))
	}
	cs = append(cs, chunk(map[string]any{}, "stop"))
	return reply{chunks: cs}
}

// call is one scripted tool call; args arrive in the given pieces.
type call struct {
	id, name string
	args     []string
}

// toolStream streams text (optional) and then the calls, their argument pieces interleaved across
// chunks by index the way OpenAI does.
func toolStream(text string, calls ...call) reply {
	var cs []string
	cs = append(cs, chunk(map[string]any{"role": "assistant"}, nil))
	if text != "" {
		cs = append(cs, chunk(map[string]any{"content": text}, nil))
	}
	for i, c := range calls {
		cs = append(cs, chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": ""},
		}}}, nil))
	}
	for piece := 0; ; piece++ {
		more := false
		for i, c := range calls {
			if piece < len(c.args) {
				more = true
				cs = append(cs, chunk(map[string]any{"tool_calls": []any{map[string]any{
					"index": i, "function": map[string]any{"arguments": c.args[piece]},
				}}}, nil))
			}
		}
		if !more {
			break
		}
	}
	cs = append(cs, chunk(map[string]any{}, "tool_calls"))
	return reply{chunks: cs}
}

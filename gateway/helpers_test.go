package gateway

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

// scriptedModel is a deterministic Model: the first round of a run calls web_search with the
// user's question, the next round answers with answer(question, toolContents), streamed in small
// chunks. hold, when set, blocks the answer round until it is closed or ctx ends (cancel tests).
type scriptedModel struct {
	answer func(q string, tools []string) string
	calls  func(q string) []store.ToolCall // first-round tool calls; default: web_search(q)
	hold   chan struct{}
}

func (m *scriptedModel) Name() string { return "scripted" }

func (m *scriptedModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	lastUser := -1
	for i, msg := range req.Messages {
		if msg.Role == "user" {
			lastUser = i
		}
	}
	q := ""
	var tools []string
	if lastUser >= 0 {
		q = req.Messages[lastUser].Content
		for _, msg := range req.Messages[lastUser+1:] {
			if msg.Role == "tool" {
				tools = append(tools, msg.Content)
			}
		}
	}
	if len(tools) == 0 {
		if m.calls != nil {
			return agent.ModelResponse{ToolCalls: m.calls(q)}, nil
		}
		args, _ := json.Marshal(map[string]string{"query": q})
		return agent.ModelResponse{ToolCalls: []store.ToolCall{{ID: "call_1", Name: "web_search", Arguments: string(args)}}}, nil
	}
	text := m.answer(q, tools)
	r := []rune(text)
	for i := 0; i < len(r); i += 3 {
		if i == 3 && m.hold != nil {
			select {
			case <-m.hold:
			case <-ctx.Done():
				return agent.ModelResponse{Text: string(r[:i])}, ctx.Err()
			}
		}
		onDelta(string(r[i:min(i+3, len(r))]))
	}
	return agent.ModelResponse{Text: text}, nil
}

// fixedSearch is a web_search tool returning result(query).
type fixedSearch struct{ result func(q string) string }

func (f fixedSearch) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "web_search", Description: "test search", Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}}}`)}
}

func (f fixedSearch) Call(_ context.Context, args string) (string, error) {
	var a struct{ Query string }
	_ = json.Unmarshal([]byte(args), &a)
	return f.result(a.Query), nil
}

// searchResult builds a DESIGN §4 web_search success result.
func searchResult(q string, results ...[3]string) string {
	type item struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	}
	items := []item{}
	for _, r := range results {
		items = append(items, item{Title: r[0], URL: r[1], Content: r[2]})
	}
	b, _ := json.Marshal(map[string]any{"query": q, "results": items, "total_results": len(items)})
	return string(b)
}

type testEnv struct {
	t     *testing.T
	st    *store.Store
	ag    *agent.Agent
	srv   *Server
	ts    *httptest.Server
	reg   *prometheus.Registry
	model *scriptedModel
}

type agentCfg = agent.Config

type envOpt func(*Config, *agentCfg)

// newEnv starts a gateway over a real store and a real agent (scripted model + fixed search tool
// unless opts change them) on a loopback httptest server.
func newEnv(t *testing.T, opts ...envOpt) *testEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "citegate.db"), store.Options{})
	require.NoError(t, err)
	model := &scriptedModel{answer: func(q string, _ []string) string { return "答案：" + q + "。[^1^]" }}
	acfg := agent.Config{
		Store: st, Model: model,
		Tools: []agent.Tool{fixedSearch{result: func(q string) string {
			return searchResult(q, [3]string{"示例来源", "https://example.com/a", "示例内容：" + q})
		}}},
	}
	reg := prometheus.NewRegistry()
	ts := httptest.NewUnstartedServer(nil)
	cfg := Config{Addr: "127.0.0.1:0", PublicURL: "http://" + ts.Listener.Addr().String(), DataDir: dir, Store: st, Registry: reg, ChatRatePerMinute: 600}
	for _, o := range opts {
		o(&cfg, &acfg)
	}
	ag, err := agent.New(acfg)
	require.NoError(t, err)
	cfg.Agent = ag
	srv, err := New(cfg)
	require.NoError(t, err)
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ag.Close(ctx)
		_ = st.Close()
	})
	return &testEnv{t: t, st: st, ag: ag, srv: srv, ts: ts, reg: reg, model: model}
}

func (e *testEnv) user(name string) (store.User, string) {
	e.t.Helper()
	u, tok, err := e.st.CreateUser(context.Background(), name)
	require.NoError(e.t, err)
	return u, tok
}

func (e *testEnv) session(u store.User, title string) store.Session {
	e.t.Helper()
	s, err := e.st.CreateSession(context.Background(), store.Session{UserID: u.ID, Channel: "desktop", Title: title})
	require.NoError(e.t, err)
	return s
}

func (e *testEnv) append(m store.Message) store.Message {
	e.t.Helper()
	m, err := e.st.AppendMessage(context.Background(), m)
	require.NoError(e.t, err)
	return m
}

// do performs a request with an optional bearer token and returns status, headers and body.
func (e *testEnv) do(method, path, token string, body io.Reader) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, body)
	require.NoError(e.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := noRedirect.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp.StatusCode, resp.Header, string(b)
}

var noRedirect = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// wsConn is a test websocket client that collects frames in a goroutine.
type wsConn struct {
	t      *testing.T
	c      *websocket.Conn
	frames chan map[string]any
	mu     sync.Mutex
	closed bool
}

func (e *testEnv) dialWS(h http.Header) (*wsConn, *http.Response, error) {
	url := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/ws"
	c, resp, err := websocket.DefaultDialer.Dial(url, h)
	if err != nil {
		return nil, resp, err
	}
	w := &wsConn{t: e.t, c: c, frames: make(chan map[string]any, 4096)}
	go func() {
		defer close(w.frames)
		for {
			_, data, err := c.ReadMessage()
			if err != nil {
				return
			}
			var f map[string]any
			if json.Unmarshal(data, &f) != nil {
				f = map[string]any{"type": "<non-json>", "raw": string(data)}
			}
			w.frames <- f
		}
	}()
	e.t.Cleanup(func() { c.Close() })
	return w, resp, nil
}

func (e *testEnv) mustWS(token string) *wsConn {
	e.t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	w, _, err := e.dialWS(h)
	require.NoError(e.t, err)
	return w
}

func (w *wsConn) send(v any) {
	w.t.Helper()
	require.NoError(w.t, w.c.WriteJSON(v))
}

// next returns the next frame. The timeout only bounds a hang: it is generous because a busy
// machine under -race can take seconds to render a long history.
func (w *wsConn) next() map[string]any {
	w.t.Helper()
	select {
	case f, ok := <-w.frames:
		require.True(w.t, ok, "websocket closed")
		return f
	case <-time.After(30 * time.Second):
		w.t.Fatal("timed out waiting for a websocket frame")
		return nil
	}
}

// until collects frames up to and including the first of type typ.
func (w *wsConn) until(typ string) []map[string]any {
	w.t.Helper()
	var out []map[string]any
	for {
		f := w.next()
		out = append(out, f)
		if f["type"] == typ {
			return out
		}
	}
}

// quiet asserts no frame arrives within d.
func (w *wsConn) quiet(d time.Duration) {
	w.t.Helper()
	select {
	case f, ok := <-w.frames:
		if ok {
			w.t.Fatalf("unexpected frame %v", f)
		}
	case <-time.After(d):
	}
}

func types(frames []map[string]any) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i], _ = f["type"].(string)
	}
	return out
}

// runTurn submits a turn through the agent directly and waits for its outcome.
func (e *testEnv) runTurn(sessionID, text string) agent.Outcome {
	e.t.Helper()
	h, err := e.ag.Submit(context.Background(), agent.Turn{SessionID: sessionID, Text: text, Channel: "desktop"})
	require.NoError(e.t, err)
	select {
	case <-h.Done():
	case <-time.After(15 * time.Second):
		e.t.Fatal("run did not finish")
	}
	return h.Outcome()
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// sessionOf returns the session of a stored message.
func (e *testEnv) sessionOf(id uint64) string {
	e.t.Helper()
	m, err := e.st.GetMessage(context.Background(), id)
	require.NoError(e.t, err)
	return m.SessionID
}

// joinDeltas merges consecutive answer.delta frames of one run into one (the gateway may send a
// run's text in fewer frames than the model produced pieces).
func joinDeltas(frames []map[string]any) []map[string]any {
	var out []map[string]any
	for _, f := range frames {
		if n := len(out); n > 0 && f["type"] == "answer.delta" && out[n-1]["type"] == "answer.delta" && out[n-1]["runId"] == f["runId"] {
			joined := maps.Clone(out[n-1])
			joined["text"] = joined["text"].(string) + f["text"].(string)
			out[n-1] = joined
			continue
		}
		out = append(out, f)
	}
	return out
}

package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// historyWhole is the REST history as it was before it streamed: the whole session read at once
// (ListMessages) and every answer's tool lines from runToolLines over all of it. It is the
// reference the streamed answer must match byte for byte.
func historyWhole(s *Server, all []store.Message, sessionID, lang string) []byte {
	lines := runToolLines(all)
	out := make([]messageJSON, 0, len(all))
	for _, m := range all {
		if !visible(m) {
			continue
		}
		mj := s.toMessageJSON(m, lang)
		if m.Role == store.RoleAssistant && m.RunID != "" {
			mj.Tools = lines[m.RunID]
		}
		out = append(out, mj)
	}
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, map[string]any{"sessionId": sessionID, "messages": out})
	return rec.Body.Bytes()
}

// TestHistoryMatchesWholeRead: the streamed history is byte for byte what the whole-session read
// wrote (runs with tool calls and failed results, answers with citations, an interrupted answer),
// for a session longer than two pages. Its call ids are unique across the session: where a later
// run reuses an earlier run's call id, the whole-session read took the later run's result for the
// earlier run's call and marked it failed, while the stream (like session.open) reads each run's
// own results (TestHistoryStreamsPages).
func TestHistoryMatchesWholeRead(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "t")
	for i := range 120 {
		fillTurns(e, s, 1, fmt.Sprint(i))
		if i == 60 {
			e.runTurn(s.ID, "年假 <b>怎么</b> 算？")
		}
	}
	e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "半截", Metadata: []byte(`{"interrupted":true}`)})

	all, err := e.st.ListMessages(t.Context(), s.ID)
	require.NoError(t, err)
	require.Greater(t, len(all), 2*exportPage)
	want := historyWhole(e.srv, all, s.ID, "zh")
	status, _, got := e.do("GET", "/api/sessions/"+s.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status)
	if string(want) != got {
		i := 0
		for i < len(want) && i < len(got) && want[i] == got[i] {
			i++
		}
		lo := max(0, i-200)
		t.Fatalf("differs at byte %d of %d/%d:\nwant …%s\ngot  …%s", i, len(want), len(got), want[lo:min(len(want), i+100)], got[lo:min(len(got), i+100)])
	}

	empty := e.session(u, "empty")
	status, _, got = e.do("GET", "/api/sessions/"+empty.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, string(historyWhole(e.srv, nil, empty.ID, "zh")), got)
}

// BenchmarkHistoryAPI compares the streamed GET /api/sessions/{id}/messages (the handler itself)
// with the whole-session answer it replaced (ListMessages, then historyWhole), on a session of
// 4,000 messages (1,000 turns: question, tool call, a ~1.6 KiB search result, a cited answer),
// and a ?limit=50 page for scale. Figures in docs/benchmarks.md.
func BenchmarkHistoryAPI(b *testing.B) {
	e := newBenchEnv(b)
	ctx := b.Context()
	u, _, err := e.st.CreateUser(ctx, "alice")
	require.NoError(b, err)
	sess, err := e.st.CreateSession(ctx, store.Session{UserID: u.ID, Channel: "desktop", Title: "长会话"})
	require.NoError(b, err)
	meta := []byte(`{"citations":[{"n":1,"url":"https://example.com/a","title":"来源"}]}`)
	tool := searchResult("q", [3]string{"来源", "https://example.com/a", strings.Repeat("内容", 400)})
	for i := range 1000 {
		run := fmt.Sprintf("run-%d", i)
		for _, m := range []store.Message{
			{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprintf("第 %d 个问题", i)},
			{SessionID: sess.ID, RunID: run, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "web_search", Arguments: `{"query":"q"}`}}},
			{SessionID: sess.ID, RunID: run, Role: store.RoleTool, ToolCallID: "c", ToolName: "web_search", Content: tool},
			{SessionID: sess.ID, RunID: run, Role: store.RoleAssistant, Content: fmt.Sprintf("回答 %d[^1^]。", i) + strings.Repeat("正文。", 100), Metadata: meta},
		} {
			_, err := e.st.AppendMessage(ctx, m)
			require.NoError(b, err)
		}
	}
	req := func(q string) *http.Request {
		r := httptest.NewRequest("GET", "/api/sessions/"+sess.ID+"/messages"+q, nil)
		r.SetPathValue("id", sess.ID)
		return r
	}
	// Warm the render cache so both variants measure reading and writing, not markdown.
	if err := e.srv.handleMessages(&discardWriter{h: http.Header{}}, req(""), u); err != nil {
		b.Fatal(err)
	}
	measure := measureCPUAndPeakHeap // CPU per request and the peak heap (export_md_test.go)
	b.Run("streamed", func(b *testing.B) {
		measure(b, func() {
			if err := e.srv.handleMessages(&discardWriter{h: http.Header{}}, req(""), u); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("whole", func(b *testing.B) {
		measure(b, func() {
			all, err := e.st.ListMessages(ctx, sess.ID)
			if err != nil {
				b.Fatal(err)
			}
			var w bytes.Buffer
			w.Write(historyWhole(e.srv, all, sess.ID, "zh"))
		})
	})
	b.Run("page50", func(b *testing.B) {
		measure(b, func() {
			if err := e.srv.handleMessages(&discardWriter{h: http.Header{}}, req("?limit=50"), u); err != nil {
				b.Fatal(err)
			}
		})
	})
}

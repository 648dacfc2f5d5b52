package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

type historyAnswer struct {
	SessionID string           `json:"sessionId"`
	Messages  []map[string]any `json:"messages"`
	HasMore   *bool            `json:"hasMore"`
	Before    *float64         `json:"before"`
}

// fillTurns appends n turns to sess: a question, a tool-calling message, its results (every third
// one an error) and the answer, each turn its own run. Every run calls its tools <prefix>c1 and
// <prefix>c2: without a prefix the ids repeat from run to run, as a model's may (a call id is
// only unique within its run).
func fillTurns(e *testEnv, sess store.Session, n int, prefix ...string) {
	p := strings.Join(prefix, "")
	for i := range n {
		run := fmt.Sprintf("%srun-%d", p, i)
		c1, c2 := p+"c1", p+"c2"
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprintf("问题 %d", i)})
		e.append(store.Message{SessionID: sess.ID, RunID: run, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{
			{ID: c1, Name: "web_search", Arguments: fmt.Sprintf(`{"query":"q%d"}`, i)},
			{ID: c2, Name: "open_web_page", Arguments: `{"url":"https://example.com/p"}`},
		}})
		e.append(store.Message{SessionID: sess.ID, RunID: run, Role: store.RoleTool, ToolCallID: c1, ToolName: "web_search", Content: `{"results":[]}`})
		result := `{"url":"https://example.com/p","content":"x"}`
		if i%3 == 0 {
			result = `{"error":"fetch failed","url":"https://example.com/p"}`
		}
		e.append(store.Message{SessionID: sess.ID, RunID: run, Role: store.RoleTool, ToolCallID: c2, ToolName: "open_web_page", Content: result})
		e.append(store.Message{SessionID: sess.ID, RunID: run, Role: store.RoleAssistant, Content: fmt.Sprintf("答案 %d", i)})
	}
}

func getHistory(t *testing.T, e *testEnv, tok, sid, query string) historyAnswer {
	t.Helper()
	status, hdr, body := e.do("GET", "/api/sessions/"+sid+"/messages"+query, tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
	assert.Contains(t, hdr.Get("Content-Type"), "application/json")
	var out historyAnswer
	require.NoError(t, json.Unmarshal([]byte(body), &out), body)
	return out
}

// TestHistoryStreamsPages: the whole history of a session longer than two store pages is read a
// page at a time (never the whole session) and is exactly the websocket's pages joined: the same
// messages, HTML and tool lines. Without parameters the answer keeps its shape (no paging keys).
func TestHistoryStreamsPages(t *testing.T) {
	rc := &readCounter{}
	e := newEnv(t, withReadCounter(rc))
	u, tok := e.user("alice")
	s := e.session(u, "long")
	other := e.session(u, "neighbour")
	fillTurns(e, s, 110) // 550 messages: three pages of 256
	e.append(store.Message{SessionID: other.ID, Role: store.RoleUser, Content: "not this session"})

	rc.reset()
	status, _, raw := e.do("GET", "/api/sessions/"+s.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status, raw)
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(raw), &keys))
	assert.Len(t, keys, 2, "only messages and sessionId: %.80s", raw)
	assert.True(t, strings.HasPrefix(raw, `{"messages":[{`) && strings.HasSuffix(raw, "}\n"), "%.40s … %s", raw, raw[len(raw)-40:])
	all := getHistory(t, e, tok, s.ID, "")
	assert.Equal(t, s.ID, all.SessionID)
	assert.Nil(t, all.HasMore)
	require.Len(t, all.Messages, 220)
	assert.Zero(t, rc.n("ListMessages"))
	assert.Equal(t, 2*3, rc.n("ListMessagesAfter"), "three pages per request")
	assert.Zero(t, rc.n("ListRunMessages"), "tool lines come from the same walk")

	ans := all.Messages[1]
	assert.Equal(t, "答案 0", ans["content"])
	tools := ans["tools"].([]any)
	require.Len(t, tools, 2)
	// Every run calls c1 and c2: each run's lines come from its own results (the whole-session
	// read took the last run's result for every c1 and marked the others failed).
	assert.Equal(t, map[string]any{"callId": "c1", "tool": "web_search", "arguments": `{"query":"q0"}`, "ok": true}, tools[0])
	assert.Equal(t, false, tools[1].(map[string]any)["ok"], "an error result")
	assert.Equal(t, true, all.Messages[3]["tools"].([]any)[1].(map[string]any)["ok"])
	assert.NotContains(t, all.Messages[0], "tools")

	// Walking back with ?limit and ?before yields the same messages, newest page first.
	var joined []map[string]any
	query := "?limit=64"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		p := getHistory(t, e, tok, s.ID, query)
		require.NotNil(t, p.HasMore)
		joined = append(p.Messages, joined...)
		if !*p.HasMore {
			break
		}
		assert.Len(t, p.Messages, 64)
		oldest := uint64(p.Messages[0]["id"].(float64))
		query = fmt.Sprintf("?limit=64&before=%d", oldest)
	}
	assert.Equal(t, all.Messages, joined, "the stream is the pages joined")
}

// TestHistoryPageParameters: ?limit and ?before page like session.open / session.more, with
// hasMore and the before echo; bad values are 400.
func TestHistoryPageParameters(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "t")
	fillTurns(e, s, 60) // 120 visible messages

	p := getHistory(t, e, tok, s.ID, "?limit=10")
	require.Len(t, p.Messages, 10)
	assert.True(t, *p.HasMore)
	assert.Nil(t, p.Before)
	assert.Equal(t, "答案 59", p.Messages[9]["content"], "the newest page")
	assert.Equal(t, "问题 55", p.Messages[0]["content"])

	before := uint64(p.Messages[0]["id"].(float64))
	p = getHistory(t, e, tok, s.ID, fmt.Sprintf("?before=%d", before))
	require.Len(t, p.Messages, historyPageSize, "limit defaults to the websocket's page")
	assert.True(t, *p.HasMore)
	require.NotNil(t, p.Before)
	assert.Equal(t, float64(before), *p.Before)
	assert.Equal(t, "答案 54", p.Messages[historyPageSize-1]["content"])

	p = getHistory(t, e, tok, s.ID, "?limit=500")
	assert.Len(t, p.Messages, 120)
	assert.False(t, *p.HasMore)
	p = getHistory(t, e, tok, s.ID, "?before=1")
	assert.Empty(t, p.Messages)
	assert.False(t, *p.HasMore)

	for _, q := range []string{"?limit=0", "?limit=501", "?limit=x", "?limit=", "?before=0", "?before=-1", "?before=x"} {
		status, _, body := e.do("GET", "/api/sessions/"+s.ID+"/messages"+q, tok, nil)
		assert.Equal(t, http.StatusBadRequest, status, q)
		assert.Contains(t, body, `"bad_request"`, q)
	}
	// Someone else's session is still 404 whatever the parameters.
	_, tok2 := e.user("bob")
	status, _, _ := e.do("GET", "/api/sessions/"+s.ID+"/messages?limit=5", tok2, nil)
	assert.Equal(t, http.StatusNotFound, status)
}

// TestHistoryStoreFailure: a failing first page is an error response; a later failure cuts the
// stream short after the pages sent (the answer is then not valid JSON, as a cut download is not).
func TestHistoryStoreFailure(t *testing.T) {
	e, ps, tok, s := pagedFailureEnv(t)
	status, _, body := e.do("GET", "/api/sessions/"+s.ID+"/messages", tok, nil)
	assert.Equal(t, http.StatusInternalServerError, status)
	assert.Contains(t, body, `"internal"`)

	ps.pages.Store(0)
	ps.failAfter = 2
	status, _, body = e.do("GET", "/api/sessions/"+s.ID+"/messages", tok, nil)
	assert.Equal(t, http.StatusOK, status)
	assert.True(t, strings.HasPrefix(body, `{"messages":[`))
	assert.Contains(t, body, "message 255")
	assert.NotContains(t, body, "message 256")
	assert.False(t, json.Valid([]byte(body)))
}

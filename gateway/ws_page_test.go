package gateway

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// TestSessionOpenSendsTheNewestPage: a session of 130 turns (each a question, a tool call, a tool
// result and an answer) opens with its newest 50 visible messages and hasMore; session.more walks
// back page by page with no gap, no overlap and no tool traffic, and the last page says hasMore
// false.
func TestSessionOpenSendsTheNewestPage(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	sess := e.session(u, "long")
	var visibleIDs []uint64
	for i := range 130 {
		q := e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprintf("问题 %d", i)})
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: "{}"}}})
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleTool, ToolCallID: "c1", ToolName: "web_search", Content: `{"results":[]}`})
		a := e.append(store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: fmt.Sprintf("回答 %d", i)})
		visibleIDs = append(visibleIDs, q.ID, a.ID)
	}
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "session.open", "sessionId": sess.ID, "clientMsgId": "o1"})
	h := ws.next()
	require.Equal(t, "session.history", h["type"])
	assert.Equal(t, "o1", h["clientMsgId"])
	assert.NotContains(t, h, "before", "the newest page has no before")

	var got []uint64
	pages := 0
	for {
		pages++
		require.Less(t, pages, 10, "paging does not end")
		msgs := h["messages"].([]any)
		require.NotEmpty(t, msgs)
		var ids []uint64
		for _, m := range msgs {
			mm := m.(map[string]any)
			assert.Contains(t, []any{"USER", "ASSISTANT"}, mm["role"])
			ids = append(ids, uint64(mm["id"].(float64)))
		}
		got = append(ids, got...)
		if h["hasMore"] != true {
			assert.Equal(t, false, h["hasMore"], "hasMore is always present")
			break
		}
		assert.Len(t, msgs, historyPageSize)
		ws.send(map[string]any{"type": "session.more", "sessionId": sess.ID, "before": ids[0], "clientMsgId": "m"})
		h = ws.next()
		require.Equal(t, "session.history", h["type"])
		assert.Equal(t, float64(ids[0]), h["before"], "the page says which message it goes above")
	}
	assert.Equal(t, visibleIDs, got, "every visible message once, in order")
	assert.Equal(t, 6, pages, "260 visible messages in pages of 50")
}

// TestSessionMoreRefusals: session.more without a cursor is a bad request; another user's session
// is not found, exactly like a missing one.
func TestSessionMoreRefusals(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.user("alice")
	_, bobTok := e.user("bob")
	sess := e.session(alice, "private")
	m := e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "秘密"})
	ws := e.mustWS(bobTok)

	ws.send(map[string]any{"type": "session.more", "sessionId": sess.ID})
	f := ws.next()
	assert.Equal(t, "error", f["type"])
	assert.Equal(t, "bad_request", f["code"])

	ws.send(map[string]any{"type": "session.more", "sessionId": sess.ID, "before": m.ID + 1})
	f = ws.next()
	assert.Equal(t, "error", f["type"])
	assert.Equal(t, "not_found", f["code"])
	ws.send(map[string]any{"type": "session.more", "sessionId": "missing", "before": 5})
	g := ws.next()
	assert.Equal(t, f["code"], g["code"])
	assert.Equal(t, f["message"], g["message"])
}

package gateway

import (
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// TestSessionOpenOfALongSession: a session whose history is larger than the slow-client budget is
// still opened; the budget is about frames piling up behind a client that does not read, not about
// the size of one answer.
func TestSessionOpenOfALongSession(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	sess := e.session(u, "long")
	long := strings.Repeat("很长的回答。", 60_000) // ~1 MB of content per answer, plus its HTML
	for range 3 {
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "再详细一点"})
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: long})
	}
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "session.open", "sessionId": sess.ID})
	h := ws.next()
	require.Equal(t, "session.history", h["type"])
	// A page holds at most historyPageBytes of content; the rest comes with session.more.
	got := len(h["messages"].([]any))
	for h["hasMore"] == true {
		msgs := h["messages"].([]any)
		oldest := msgs[0].(map[string]any)["id"]
		ws.send(map[string]any{"type": "session.more", "sessionId": sess.ID, "before": oldest})
		h = ws.next()
		require.Equal(t, "session.history", h["type"])
		got += len(h["messages"].([]any))
	}
	assert.Equal(t, 6, got)
}

// TestChatSendAtTheTextLimitWithEscapedJSON: a message within the 32 KiB text limit is accepted
// however the client encodes its JSON; encoders that escape non-ASCII (Python's json.dumps by
// default) write each CJK character as a 6-byte \uXXXX, twice its UTF-8 size.
func TestChatSendAtTheTextLimitWithEscapedJSON(t *testing.T) {
	e := newEnv(t)
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	n := maxTextBytes / len("字") // as many as fit in the limit
	frame := `{"type":"chat.send","text":"` + strings.Repeat(`\u5b57`, n) + `"}`
	require.Greater(t, len(frame), 64<<10)
	require.NoError(t, ws.c.WriteMessage(websocket.TextMessage, []byte(frame)))
	f := ws.next()
	assert.Equal(t, "session.created", f["type"], "%v", f)
	ws.until("run.finished")
}

package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

var (
	firstFrameRe = regexp.MustCompile(`(?s)<script type="application/json" id="first-page" data-session="([^"]*)">(.*?)</script>`)
	articleRe    = regexp.MustCompile(`(?s)<article class="msg (user|assistant)" data-id="(\d+)" id="msg-\d+"><div class="role">[^<]*</div><div class="bubble">(.*?)</div></article>`)
)

// TestFirstPageIsTheWebsocketPage: GET /?s=<id> renders the chat's newest page into the app shell
// — the same messages, in the same order, with the same sanitised HTML as the websocket's
// session.history — and carries that frame (without the HTML) for the scripts. Another user's chat,
// a missing one and the bare shell render no chat.
func TestFirstPageIsTheWebsocketPage(t *testing.T) {
	e := newEnv(t)
	alice, tok := e.user("alice")
	_, bobTok := e.user("bob")
	sess := e.session(alice, `年假 <b>标题</b>`)
	meta := json.RawMessage(`{"citations":[{"n":1,"url":"https://hr.example.com/leave","title":"年假规定"}],"links":{"hidden":0,"allowed":[]}}`)
	for i := range 60 {
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprintf("第 %d 问 <script>alert(1)</script>", i)})
		e.append(store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: fmt.Sprintf("## 回答 %d\n\n年假五天[^1^]，见 https://evil.example.com/x", i), Metadata: meta})
	}
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

	resp, page := e.get("/?s="+sess.ID, bearer(tok))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, page, `<h1 id="chat-title">年假 &lt;b&gt;标题&lt;/b&gt;</h1>`)
	assert.NotContains(t, page, "<script>alert", "user text is escaped")
	// The one inline script, scrolling the chat to its end before the first paint, is allowed by
	// its hash in the page's CSP and by nothing broader.
	inline := regexp.MustCompile(`<script>([^<]*)</script>`).FindAllStringSubmatch(page, -1)
	require.Len(t, inline, 1)
	sum := sha256.Sum256([]byte(inline[0][1]))
	csp := `script-src 'self' &#39;sha256-` + base64.StdEncoding.EncodeToString(sum[:]) + `&#39;;`
	assert.True(t, strings.Contains(page, csp), "the CSP allows the inline script by its hash: %s", csp)
	assert.NotContains(t, page, "unsafe-inline")

	arts := articleRe.FindAllStringSubmatch(page, -1)
	require.Len(t, arts, historyPageSize)
	m := firstFrameRe.FindStringSubmatch(page)
	require.NotNil(t, m, "the frame is in the page")
	assert.Equal(t, sess.ID, m[1])
	var frame struct {
		Type      string        `json:"type"`
		SessionID string        `json:"sessionId"`
		HasMore   *bool         `json:"hasMore"`
		Messages  []messageJSON `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(m[2]), &frame))
	assert.Equal(t, "session.history", frame.Type)
	assert.Equal(t, sess.ID, frame.SessionID)
	require.NotNil(t, frame.HasMore)
	assert.True(t, *frame.HasMore)

	// The websocket's page, asked for now.
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "session.open", "sessionId": sess.ID})
	h := ws.next()
	require.Equal(t, "session.history", h["type"])
	wsMsgs := h["messages"].([]any)
	require.Len(t, wsMsgs, historyPageSize)
	require.Len(t, frame.Messages, historyPageSize)
	for i, a := range arts {
		w := wsMsgs[i].(map[string]any)
		assert.Equal(t, fmt.Sprint(w["id"]), a[2], "message %d: same id", i)
		assert.Equal(t, strings.ToLower(w["role"].(string)), a[1])
		assert.Equal(t, w["html"], a[3], "message %d: the article holds the websocket's HTML", i)
		assert.Equal(t, fmt.Sprint(w["id"]), fmt.Sprint(frame.Messages[i].ID))
		assert.Empty(t, frame.Messages[i].HTML, "the frame does not carry the HTML twice")
		assert.Equal(t, w["content"], frame.Messages[i].Content)
	}
	assert.Contains(t, arts[1][3], "<sup", "answers are rendered with their markers")
	for _, a := range arts {
		assert.NotContains(t, html.UnescapeString(a[3]), "evil.example.com", "the link rule applies to the first page too")
	}

	for name, c := range map[string]struct{ path, tok string }{
		"another user's chat": {"/?s=" + sess.ID, bobTok},
		"a missing chat":      {"/?s=nope", tok},
		"no chat":             {"/", tok},
	} {
		resp, page := e.get(c.path, bearer(c.tok))
		require.Equal(t, http.StatusOK, resp.StatusCode, name)
		assert.NotContains(t, page, `id="first-page"`, name)
		assert.NotContains(t, page, `<article`, name)
		assert.NotContains(t, page, `<script>`, name)
		assert.Contains(t, page, `<p class="empty">`, name)
	}
}

// TestSessionOpenNewest: session.open carrying newest (the last message the server-rendered page
// shows) is answered by session.unchanged while that is still the newest message, and by the page
// as usual once something was added; another user's chat stays not found.
func TestSessionOpenNewest(t *testing.T) {
	e := newEnv(t)
	alice, tok := e.user("alice")
	_, bobTok := e.user("bob")
	sess := e.session(alice, "chat")
	e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "问"})
	last := e.append(store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: "答"})
	ws := e.mustWS(tok)

	ws.send(map[string]any{"type": "session.open", "sessionId": sess.ID, "newest": last.ID, "clientMsgId": "c1"})
	f := ws.next()
	assert.Equal(t, "session.unchanged", f["type"])
	assert.Equal(t, sess.ID, f["sessionId"])
	assert.Equal(t, "c1", f["clientMsgId"])

	added := e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "又问"})
	ws.send(map[string]any{"type": "session.open", "sessionId": sess.ID, "newest": last.ID})
	f = ws.next()
	require.Equal(t, "session.history", f["type"])
	msgs := f["messages"].([]any)
	require.Len(t, msgs, 3)
	assert.Equal(t, float64(added.ID), msgs[2].(map[string]any)["id"])

	bob := e.mustWS(bobTok)
	bob.send(map[string]any{"type": "session.open", "sessionId": sess.ID, "newest": added.ID})
	f = bob.next()
	assert.Equal(t, "error", f["type"])
	assert.Equal(t, "not_found", f["code"])
}

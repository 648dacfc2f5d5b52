package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

func TestAPIUnauthenticated(t *testing.T) {
	e := newEnv(t)
	routes := []struct{ method, path string }{
		{"GET", "/api/me"},
		{"GET", "/api/sessions"},
		{"GET", "/api/sessions/x/messages"},
		{"POST", "/api/sessions/x/shares"},
		{"DELETE", "/api/shares/x"},
		{"GET", "/api/sessions/x/export.jsonl"},
		{"GET", "/api/messages/1/citations/1/preview"},
		{"GET", "/ws"},
	}
	for _, tok := range []string{"", "not-a-token"} {
		for _, rt := range routes {
			t.Run(rt.method+rt.path+"/"+tok, func(t *testing.T) {
				status, _, body := e.do(rt.method, rt.path, tok, nil)
				assert.Equal(t, http.StatusUnauthorized, status)
				assert.JSONEq(t, `{"error":{"code":"unauthorized","message":"missing or invalid access token"}}`, body)
			})
		}
	}
}

func TestAPIMeAndSessions(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	other, _ := e.user("bob")
	s1 := e.session(u, "first")
	e.session(other, "not alice's")
	s2 := e.session(u, "second")
	e.append(store.Message{SessionID: s1.ID, Role: store.RoleUser, Content: "bump"}) // s1 newest now

	status, _, body := e.do("GET", "/api/me", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"id":"`+u.ID+`","name":"alice","model":"scripted","operator":false}`, body)

	status, hdr, body := e.do("GET", "/api/sessions", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
	var got struct {
		Sessions []map[string]any `json:"sessions"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Len(t, got.Sessions, 2)
	assert.Equal(t, s1.ID, got.Sessions[0]["id"])
	assert.Equal(t, s2.ID, got.Sessions[1]["id"])
	assert.Equal(t, "first", got.Sessions[0]["title"])
	assert.Equal(t, "desktop", got.Sessions[0]["channel"])
	assert.Contains(t, got.Sessions[0], "createdAt")
	assert.Contains(t, got.Sessions[0], "updatedAt")
}

func TestAPIMessages(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "t")
	cit := `{"citations":[{"n":2,"url":"https://example.com/b","title":"B <i>x</i>"},{"n":5,"url":"https://example.com/e","title":"E"}],"other":1}`
	um := e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "问 <script>alert(1)</script>"})
	e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "", ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: "{}"}}})
	e.append(store.Message{SessionID: s.ID, Role: store.RoleTool, Content: "{}", ToolCallID: "c1", ToolName: "web_search"})
	am := e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "甲[^2^]乙[^5^]丙[^9^]", Metadata: json.RawMessage(cit)})
	bad := e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "坏[^1^]", Metadata: json.RawMessage(`{"citations":"nope"}`)})
	intr := e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "半截", Metadata: json.RawMessage(`{"interrupted":true}`)})

	status, _, body := e.do("GET", "/api/sessions/"+s.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	var got struct {
		SessionID string           `json:"sessionId"`
		Messages  []map[string]any `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	assert.Equal(t, s.ID, got.SessionID)
	require.Len(t, got.Messages, 4, "tool calls and tool results are not part of the conversation")
	ids := []float64{}
	for _, m := range got.Messages {
		ids = append(ids, m["id"].(float64))
	}
	assert.Equal(t, []float64{float64(um.ID), float64(am.ID), float64(bad.ID), float64(intr.ID)}, ids)

	user := got.Messages[0]
	assert.Equal(t, "USER", user["role"])
	assert.NotContains(t, user["html"], "<script>")
	assert.Contains(t, user["html"], "&lt;script&gt;")
	assert.Equal(t, []any{}, user["citations"])

	ans := got.Messages[1]
	assert.Equal(t, "甲[^2^]乙[^5^]丙[^9^]", ans["content"], "content keeps the raw markers")
	html := ans["html"].(string)
	assert.Contains(t, html, `data-n="5" data-k="2"`, "display numbers 1..k in n order")
	assert.Contains(t, html, `id="m`+itoa(int(am.ID))+`-src-1"`)
	assert.NotContains(t, html, "[^9^]", "invalid markers vanish")
	assert.NotContains(t, html, "<i>x</i>", "titles are escaped")
	cits := ans["citations"].([]any)
	require.Len(t, cits, 2)
	assert.Equal(t, float64(2), cits[0].(map[string]any)["n"])
	assert.NotContains(t, ans, "interrupted")

	badMsg := got.Messages[2]
	assert.Equal(t, []any{}, badMsg["citations"], "malformed metadata shows no sources and raises nothing")
	assert.NotContains(t, badMsg["html"], "sources")

	assert.Equal(t, true, got.Messages[3]["interrupted"])
}

// TestCrossUserNotFound: anything not the caller's is answered exactly like a missing resource.
func TestCrossUserNotFound(t *testing.T) {
	e := newEnv(t)
	alice, aliceTok := e.user("alice")
	_, bobTok := e.user("bob")
	s := e.session(alice, "alice's")
	out := e.runTurn(s.ID, "电子发票")
	require.Equal(t, store.PhaseCompleted, out.Phase)
	status, _, body := e.do("POST", "/api/sessions/"+s.ID+"/shares", aliceTok, nil)
	require.Equal(t, http.StatusCreated, status, body)
	var sh shareJSON
	require.NoError(t, json.Unmarshal([]byte(body), &sh))

	fid := itoa(int(out.FinalMessageID))
	cases := []struct{ method, theirs, missing string }{
		{"GET", "/api/sessions/" + s.ID + "/messages", "/api/sessions/nosuchsession/messages"},
		{"POST", "/api/sessions/" + s.ID + "/shares", "/api/sessions/nosuchsession/shares"},
		{"GET", "/api/sessions/" + s.ID + "/export.jsonl", "/api/sessions/nosuchsession/export.jsonl"},
		{"GET", "/api/messages/" + fid + "/citations/1/preview", "/api/messages/999999/citations/1/preview"},
		{"GET", "/api/messages/" + fid + "/citations/1/preview?recheck=1", "/api/messages/abc/citations/1/preview"},
		{"DELETE", "/api/shares/" + sh.Token, "/api/shares/nosuchtoken"},
	}
	for _, c := range cases {
		t.Run(c.method+c.theirs, func(t *testing.T) {
			st1, h1, b1 := e.do(c.method, c.theirs, bobTok, nil)
			st2, h2, b2 := e.do(c.method, c.missing, bobTok, nil)
			assert.Equal(t, http.StatusNotFound, st1)
			assert.Equal(t, st2, st1)
			assert.Equal(t, b2, b1, "bodies must be identical")
			assert.Equal(t, h2.Get("Content-Type"), h1.Get("Content-Type"))
			assert.JSONEq(t, `{"error":{"code":"not_found","message":"not found"}}`, b1)
		})
	}
	// The share survived bob's attempt to revoke it.
	status, _, _ = e.do("GET", "/s/"+sh.Token, "", nil)
	assert.Equal(t, http.StatusOK, status)
	// And alice still sees her own things.
	status, _, _ = e.do("GET", "/api/messages/"+fid+"/citations/1/preview", aliceTok, nil)
	assert.Equal(t, http.StatusOK, status)
}

func TestUnknownAPIRoute(t *testing.T) {
	e := newEnv(t)
	status, _, body := e.do("GET", "/api/nothing", "", nil)
	assert.Equal(t, http.StatusNotFound, status)
	assert.JSONEq(t, `{"error":{"code":"not_found","message":"not found"}}`, body)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestEnsureLocalUserNotLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.168.1.4:80", "[::]:80"} {
		t.Run(addr, func(t *testing.T) {
			e := newEnv(t, func(c *Config, _ *agentCfg) { c.Addr = addr })
			link, err := e.srv.EnsureLocalUser(context.Background())
			require.NoError(t, err)
			assert.Empty(t, link)
			n, err := e.st.CountUsers(context.Background())
			require.NoError(t, err)
			assert.Zero(t, n)
		})
	}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:1", "[::1]:9"} {
		assert.True(t, isLoopbackAddr(addr), addr)
	}
}

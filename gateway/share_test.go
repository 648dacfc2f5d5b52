package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

func (e *testEnv) createShare(tok, sessionID string) shareJSON {
	e.t.Helper()
	status, _, body := e.do("POST", "/api/sessions/"+sessionID+"/shares", tok, nil)
	require.Equal(e.t, http.StatusCreated, status, "a new link: "+body)
	var sh shareJSON
	require.NoError(e.t, json.Unmarshal([]byte(body), &sh))
	return sh
}

func parseJSONL(t *testing.T, body string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

func TestShareWatermarkAndRevoke(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "发票 <b>问题</b>")
	first := e.runTurn(s.ID, "电子发票抬头写错了怎么办")
	require.Equal(t, store.PhaseCompleted, first.Phase)

	sh := e.createShare(tok, s.ID)
	assert.Equal(t, e.srv.cfg.PublicURL+"/s/"+sh.Token, sh.URL)
	assert.GreaterOrEqual(t, len(sh.Token), 22, "≥128 bits of token")
	assert.Equal(t, first.FinalMessageID, sh.Watermark, "frozen at the session's last message")

	// A later turn never appears in the share.
	second := e.runTurn(s.ID, "后来的追问XYZ")
	require.Equal(t, store.PhaseCompleted, second.Phase)

	status, hdr, page := e.do("GET", "/s/"+sh.Token, "", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, hdr.Get("Content-Type"), "text/html")
	assert.Contains(t, hdr.Get("X-Robots-Tag"), "noindex")
	assert.Equal(t, "no-referrer", hdr.Get("Referrer-Policy"))
	assert.Contains(t, page, `<meta name="robots" content="noindex`)
	assert.Contains(t, page, "电子发票抬头写错了怎么办")
	assert.NotContains(t, page, "后来的追问XYZ")
	assert.Contains(t, page, `class="cite-ref"`, "same superscripts as the desktop view")
	assert.Contains(t, page, `class="sources"`)
	assert.Contains(t, page, "来源 1")
	assert.Contains(t, page, "https://example.com/a")
	assert.NotContains(t, page, "src-preview", "no excerpt preview for anonymous readers")
	assert.NotContains(t, page, "<b>问题</b>", "the title is escaped")
	assert.NotContains(t, page, "alice", "no user data beyond the conversation")
	assert.Contains(t, page, "/s/"+sh.Token+"/export.jsonl")

	// English readers get English labels.
	req, _ := http.NewRequest("GET", e.ts.URL+"/s/"+sh.Token, nil)
	req.Header.Set("Accept-Language", "en-GB,en")
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	assert.Contains(t, readAll(t, resp), "Sources 1")

	// The snapshot export holds exactly the messages up to the watermark.
	status, hdr, body := e.do("GET", "/s/"+sh.Token+"/export.jsonl", "", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, hdr.Get("Content-Type"), "application/x-ndjson")
	lines := parseJSONL(t, body)
	require.NotEmpty(t, lines)
	for _, l := range lines {
		assert.LessOrEqual(t, uint64(l["id"].(float64)), sh.Watermark)
		assert.NotContains(t, l["content"], "后来的追问XYZ")
	}
	assert.Equal(t, float64(first.FinalMessageID), lines[len(lines)-1]["id"])
	assert.Contains(t, body, `"citations"`)
	assert.NotContains(t, body, `"callId"`, "the tool record stays out, its ids included")
	assert.NotContains(t, body, `"messageId"`)
	full := parseJSONL(t, mustGet(t, e, "/api/sessions/"+s.ID+"/export.jsonl", tok))
	assert.Greater(t, len(full), len(lines))

	// Unknown and revoked shares: the same 404 page.
	st1, _, missing := e.do("GET", "/s/no-such-token", "", nil)
	assert.Equal(t, http.StatusNotFound, st1)
	status, _, _ = e.do("DELETE", "/api/shares/"+sh.Token, tok, nil)
	assert.Equal(t, http.StatusNoContent, status)
	st2, _, revoked := e.do("GET", "/s/"+sh.Token, "", nil)
	assert.Equal(t, http.StatusNotFound, st2)
	assert.Equal(t, missing, revoked)
	status, _, _ = e.do("GET", "/s/"+sh.Token+"/export.jsonl", "", nil)
	assert.Equal(t, http.StatusNotFound, status)
	status, _, body = e.do("DELETE", "/api/shares/"+sh.Token, tok, nil)
	assert.Equal(t, http.StatusNotFound, status, "revoking twice")
	assert.JSONEq(t, `{"error":{"code":"not_found","message":"not found"}}`, body)
}

func mustGet(t *testing.T, e *testEnv, path, tok string) string {
	t.Helper()
	status, _, body := e.do("GET", path, tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	return body
}

func TestShareEmptySession(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "empty")
	status, _, body := e.do("POST", "/api/sessions/"+s.ID+"/shares", tok, nil)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "bad_request")
}

// TestShareSurvivesRestart reopens the database under a new server: the link still works and is
// still frozen.
func TestShareSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "citegate.db")
	open := func() (*store.Store, *agent.Agent, *Server) {
		st, err := store.Open(path, store.Options{})
		require.NoError(t, err)
		ag, err := agent.New(agent.Config{Store: st, Model: &scriptedModel{answer: func(q string, _ []string) string { return q + "[^1^]" }},
			Tools: []agent.Tool{fixedSearch{result: func(q string) string { return searchResult(q, [3]string{"T", "https://example.com/t", "x"}) }}}})
		require.NoError(t, err)
		srv, err := New(Config{Addr: "127.0.0.1:0", Store: st, Agent: ag, Registry: prometheus.NewRegistry()})
		require.NoError(t, err)
		return st, ag, srv
	}
	closeAll := func(st *store.Store, ag *agent.Agent, srv *Server) {
		srv.Close()
		require.NoError(t, ag.Close(context.Background()))
		require.NoError(t, st.Close())
	}
	st, ag, srv := open()
	ctx := context.Background()
	u, _, err := st.CreateUser(ctx, "alice")
	require.NoError(t, err)
	s, err := st.CreateSession(ctx, store.Session{UserID: u.ID, Channel: "desktop", Title: "t"})
	require.NoError(t, err)
	_, err = st.AppendMessage(ctx, store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "before the share"})
	require.NoError(t, err)
	wm, err := st.LastMessageID(ctx, s.ID)
	require.NoError(t, err)
	tok, _, err := st.CreateShare(ctx, s.ID, u.ID, wm)
	require.NoError(t, err)
	closeAll(st, ag, srv)

	st, ag, srv = open()
	defer closeAll(st, ag, srv)
	_, err = st.AppendMessage(ctx, store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "after the restart"})
	require.NoError(t, err)
	rec := httptestGet(srv, "/s/"+tok)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), "before the share")
	assert.NotContains(t, rec.Body.String(), "after the restart")
}

// TestShareExportPublicOnly: the public export of a share holds the conversation (USER and final
// ASSISTANT messages with their verified citations) and nothing of the tool record: no tool
// arguments, no result content, no document the answer did not cite. The owner's export keeps it all.
func TestShareExportPublicOnly(t *testing.T) {
	const (
		secretArgs    = "内部检索词-ARGS-7d1f"
		uncitedTitle  = "未引用的内部文件-TITLE-93ab"
		uncitedURL    = "https://intranet.example.com/uncited-doc-5c2e"
		uncitedBody   = "机密：未被引用的正文-BODY-41f0"
		citedExcerpt  = "被引用来源的摘录-EXCERPT-0b77"
		citedURL      = "https://example.com/cited"
		answerMarkers = "年假五天。[^1^]"
	)
	e := newEnv(t, func(_ *Config, a *agentCfg) {
		a.Model = &scriptedModel{
			answer: func(string, []string) string { return answerMarkers },
			calls: func(string) []store.ToolCall {
				args, _ := json.Marshal(map[string]string{"query": secretArgs})
				return []store.ToolCall{{ID: "call_1", Name: "web_search", Arguments: string(args)}}
			},
		}
		a.Tools = []agent.Tool{fixedSearch{result: func(q string) string {
			return searchResult(q,
				[3]string{"被引用的来源", citedURL, citedExcerpt},
				[3]string{uncitedTitle, uncitedURL, uncitedBody})
		}}}
	})
	u, tok := e.user("alice")
	s := e.session(u, "share export")
	out := e.runTurn(s.ID, "年假有几天")
	require.Equal(t, store.PhaseCompleted, out.Phase)
	require.Len(t, out.Citations, 1)

	owner := mustGet(t, e, "/api/sessions/"+s.ID+"/export.jsonl", tok)
	for _, secret := range []string{secretArgs, uncitedTitle, uncitedURL, uncitedBody, citedExcerpt} {
		require.Contains(t, owner, secret, "the owner's export is the whole record")
	}

	sh := e.createShare(tok, s.ID)
	status, _, body := e.do("GET", "/s/"+sh.Token+"/export.jsonl", "", nil)
	require.Equal(t, http.StatusOK, status)
	for _, secret := range []string{secretArgs, uncitedTitle, uncitedURL, uncitedBody, citedExcerpt, "toolCalls", "toolCallId", "TOOL", "runId"} {
		assert.NotContains(t, body, secret)
	}
	lines := parseJSONL(t, body)
	require.Len(t, lines, 2, "the question and the answer")
	assert.Equal(t, "USER", lines[0]["role"])
	assert.Equal(t, "年假有几天", lines[0]["content"])
	assert.NotContains(t, lines[0], "metadata")
	assert.Equal(t, "ASSISTANT", lines[1]["role"])
	assert.Equal(t, answerMarkers, lines[1]["content"], "raw markers, checkable against the citations")
	md, _ := json.Marshal(lines[1]["metadata"])
	var doc struct {
		Citations []map[string]any `json:"citations"`
	}
	require.NoError(t, json.Unmarshal(md, &doc))
	require.Len(t, doc.Citations, 1)
	assert.Equal(t, float64(1), doc.Citations[0]["n"])
	assert.Equal(t, citedURL, doc.Citations[0]["url"])
}

// TestShareManagement: GET /api/shares lists the caller's links; sharing the same chat again hands
// back the live link; once the chat grew a new link is made and both are listed; revoke works by
// token and by id, and nobody can list, reuse or revoke someone else's links.
func TestShareManagement(t *testing.T) {
	e := newEnv(t)
	alice, aliceTok := e.user("alice")
	_, bobTok := e.user("bob")
	s := e.session(alice, "年假问题")
	require.Equal(t, store.PhaseCompleted, e.runTurn(s.ID, "年假几天").Phase)

	list := func(tok string) []map[string]any {
		t.Helper()
		status, hdr, body := e.do("GET", "/api/shares", tok, nil)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
		var doc struct {
			Shares []map[string]any `json:"shares"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &doc))
		require.NotNil(t, doc.Shares, "an empty list is [], not null")
		return doc.Shares
	}
	assert.Empty(t, list(aliceTok))

	first := e.createShare(aliceTok, s.ID)
	status, _, body := e.do("POST", "/api/sessions/"+s.ID+"/shares", aliceTok, nil)
	require.Equal(t, http.StatusOK, status, "sharing again: the live link, not a new one")
	var again shareJSON
	require.NoError(t, json.Unmarshal([]byte(body), &again))
	assert.Equal(t, first, again)

	got := list(aliceTok)
	require.Len(t, got, 1)
	assert.Equal(t, first.Token, got[0]["token"])
	assert.Equal(t, first.URL, got[0]["url"])
	assert.Equal(t, first.ID, got[0]["id"])
	assert.Equal(t, s.ID, got[0]["sessionId"])
	assert.Equal(t, "年假问题", got[0]["title"])
	assert.Equal(t, float64(first.Watermark), got[0]["watermark"])
	assert.Equal(t, true, got[0]["live"])
	assert.NotEmpty(t, got[0]["createdAt"])
	assert.Empty(t, list(bobTok), "bob sees none of alice's links")

	// The chat grew: a new link frozen at the new watermark; the old one is still live and listed.
	require.Equal(t, store.PhaseCompleted, e.runTurn(s.ID, "病假呢").Phase)
	second := e.createShare(aliceTok, s.ID)
	assert.NotEqual(t, first.Token, second.Token)
	assert.Greater(t, second.Watermark, first.Watermark)
	got = list(aliceTok)
	require.Len(t, got, 2)
	assert.Equal(t, second.Token, got[0]["token"], "newest first")
	assert.Equal(t, first.Token, got[1]["token"])
	status, _, _ = e.do("GET", "/s/"+first.Token, "", nil)
	assert.Equal(t, http.StatusOK, status)

	// Bob can neither revoke by token nor by id; both answers are the plain 404.
	for _, ref := range []string{first.Token, first.ID} {
		status, _, body = e.do("DELETE", "/api/shares/"+ref, bobTok, nil)
		assert.Equal(t, http.StatusNotFound, status)
		assert.JSONEq(t, `{"error":{"code":"not_found","message":"not found"}}`, body)
	}
	// Alice revokes the old one by id (as the list names it), the new one by token.
	status, _, _ = e.do("DELETE", "/api/shares/"+first.ID, aliceTok, nil)
	assert.Equal(t, http.StatusNoContent, status)
	status, _, _ = e.do("GET", "/s/"+first.Token, "", nil)
	assert.Equal(t, http.StatusNotFound, status)
	got = list(aliceTok)
	require.Len(t, got, 1)
	assert.Equal(t, second.Token, got[0]["token"])
	status, _, _ = e.do("DELETE", "/api/shares/"+second.Token, aliceTok, nil)
	assert.Equal(t, http.StatusNoContent, status)
	assert.Empty(t, list(aliceTok))

	// A revoked link is never handed out again.
	third := e.createShare(aliceTok, s.ID)
	assert.NotEqual(t, second.Token, third.Token)

	status, _, _ = e.do("GET", "/api/shares", "", nil)
	assert.Equal(t, http.StatusUnauthorized, status)
}

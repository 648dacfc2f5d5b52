package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// askWS sends frame on ws and returns the run's frames up to run.finished with the user message
// and answer ids.
func askWS(t *testing.T, ws *wsConn, frame map[string]any) (frames []map[string]any, userID, answerID uint64) {
	t.Helper()
	ws.send(frame)
	frames = ws.until("run.finished")
	for _, f := range frames {
		switch f["type"] {
		case "run.started":
			userID = uint64(f["userMessageId"].(float64))
		case "answer.final":
			answerID = uint64(f["messageId"].(float64))
		case "error":
			t.Fatalf("error frame %v", f)
		}
	}
	require.NotZero(t, userID, "%v", types(frames))
	return frames, userID, answerID
}

func metaOf(t *testing.T, st *store.Store, id uint64) map[string]any {
	t.Helper()
	m, err := st.GetMessage(context.Background(), id)
	require.NoError(t, err)
	out := map[string]any{}
	if len(m.Metadata) > 0 {
		require.NoError(t, json.Unmarshal(m.Metadata, &out))
	}
	return out
}

func TestWSRegenerateAndEdit(t *testing.T) {
	e := newEnv(t)
	alice, tok := e.user("alice")
	_, bobTok := e.user("bob")
	ws := e.mustWS(tok)

	frames, q1, a1 := askWS(t, ws, map[string]any{"type": "chat.send", "text": "年假怎么算"})
	sid := frames[0]["sessionId"].(string)
	require.NotZero(t, a1)

	// Regenerate from the answer: a new run of the same question, pointing at the first asking.
	_, q2, a2 := askWS(t, ws, map[string]any{"type": "chat.regenerate", "sessionId": sid, "messageId": a1})
	m2, err := e.st.GetMessage(context.Background(), q2)
	require.NoError(t, err)
	assert.Equal(t, "年假怎么算", m2.Content)
	assert.Equal(t, map[string]any{"regenerateOf": float64(q1)}, metaOf(t, e.st, q2))
	assert.NotEqual(t, a1, a2)

	// Regenerating a regenerated answer (or its question) still points at the first asking.
	_, q3, _ := askWS(t, ws, map[string]any{"type": "chat.regenerate", "sessionId": sid, "messageId": a2})
	assert.Equal(t, map[string]any{"regenerateOf": float64(q1)}, metaOf(t, e.st, q3))
	_, q4, _ := askWS(t, ws, map[string]any{"type": "chat.regenerate", "sessionId": sid, "messageId": q2})
	assert.Equal(t, map[string]any{"regenerateOf": float64(q1)}, metaOf(t, e.st, q4))

	// Edit and resend: the edited text runs; every earlier message stays.
	_, q5, a5 := askWS(t, ws, map[string]any{"type": "chat.edit", "sessionId": sid, "messageId": q1, "text": "  病假怎么算  "})
	m5, err := e.st.GetMessage(context.Background(), q5)
	require.NoError(t, err)
	assert.Equal(t, "病假怎么算", m5.Content)
	assert.Equal(t, map[string]any{"editOf": float64(q1)}, metaOf(t, e.st, q5))
	final, err := e.st.GetMessage(context.Background(), a5)
	require.NoError(t, err)
	assert.Contains(t, final.Content, "病假怎么算")

	// The history carries what each question is; the old answers are all still there.
	ws.send(map[string]any{"type": "session.open", "sessionId": sid})
	hist := ws.until("session.history")
	var msgs []messageJSON
	raw, _ := json.Marshal(hist[len(hist)-1]["messages"])
	require.NoError(t, json.Unmarshal(raw, &msgs))
	var answers int
	byID := map[uint64]messageJSON{}
	for _, m := range msgs {
		byID[m.ID] = m
		if m.Role == store.RoleAssistant {
			answers++
		}
	}
	assert.Equal(t, 5, answers)
	assert.Zero(t, byID[q1].RegenerateOf)
	assert.Equal(t, q1, byID[q2].RegenerateOf)
	assert.Equal(t, q1, byID[q5].EditOf)
	assert.Contains(t, byID[a1].HTML, "年假怎么算", "the first answer is still shown")

	// Errors: the connection stays up and nothing runs.
	tool := e.append(store.Message{SessionID: sid, Role: store.RoleTool, Content: "{}", ToolCallID: "x", ToolName: "web_search"})
	other := e.session(alice, "other")
	otherQ := e.append(store.Message{SessionID: other.ID, Role: store.RoleUser, Content: "other question"})
	for _, tc := range []struct {
		frame map[string]any
		code  string
	}{
		{map[string]any{"type": "chat.edit", "sessionId": sid, "messageId": a1, "text": "x"}, CodeBadRequest},
		{map[string]any{"type": "chat.edit", "sessionId": sid, "messageId": q1, "text": "  "}, CodeBadRequest},
		{map[string]any{"type": "chat.regenerate", "sessionId": sid, "messageId": tool.ID}, CodeBadRequest},
		{map[string]any{"type": "chat.regenerate", "sessionId": sid}, CodeBadRequest},
		{map[string]any{"type": "chat.regenerate", "sessionId": sid, "messageId": otherQ.ID}, CodeNotFound},
		{map[string]any{"type": "chat.regenerate", "sessionId": sid, "messageId": 1 << 40}, CodeNotFound},
		{map[string]any{"type": "chat.regenerate", "sessionId": sid, "messageId": "12"}, CodeBadRequest},
	} {
		ws.send(tc.frame)
		f := ws.next()
		assert.Equal(t, "error", f["type"], "%v", tc.frame)
		assert.Equal(t, tc.code, f["code"], "%v → %v", tc.frame, f)
	}
	bob := e.mustWS(bobTok)
	for _, typ := range []string{"chat.regenerate", "chat.edit"} {
		bob.send(map[string]any{"type": typ, "sessionId": sid, "messageId": q1, "text": "hijack"})
		f := bob.next()
		assert.Equal(t, CodeNotFound, f["code"], "another user's chat is not found")
	}
	ws.quiet(200 * time.Millisecond)
	after, err := e.st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	for _, m := range after {
		assert.NotEqual(t, "hijack", m.Content)
	}
}

// jsonBody is a request body for e.send-style helpers.
func jsonBody(v any) *strings.Reader {
	b, _ := json.Marshal(v)
	return strings.NewReader(string(b))
}

func TestFeedback(t *testing.T) {
	e := newEnv(t)
	alice, tok := e.user("alice")
	_, bobTok := e.user("bob")
	sess := e.session(alice, "t")
	out := e.runTurn(sess.ID, "年假")
	ans := out.FinalMessageID
	require.NotZero(t, ans)
	path := "/api/messages/" + strconv.FormatUint(ans, 10) + "/feedback"
	metric := func(vote string) float64 {
		_, _, body := e.do("GET", "/metrics", "", nil)
		return metricValue(t, body, `citegate_feedback_total{vote="`+vote+`"}`)
	}
	assert.Equal(t, 0.0, metric("up"))

	status, _, body := e.do("PUT", path, tok, jsonBody(map[string]any{"vote": "up"}))
	require.Equal(t, http.StatusOK, status, body)
	fb := metaOf(t, e.st, ans)["feedback"].(map[string]any)
	assert.Equal(t, "up", fb["vote"])
	assert.Equal(t, alice.ID, fb["by"])
	assert.Contains(t, metaOf(t, e.st, ans), "citations", "other metadata keys are kept")
	assert.Equal(t, 1.0, metric("up"))

	// Adding a comment to the same vote is not a new vote; changing the vote is.
	status, _, body = e.do("PUT", path, tok, jsonBody(map[string]any{"vote": "up", "comment": " 很有用\n谢谢 "}))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, 1.0, metric("up"))
	status, _, _ = e.do("PUT", path, tok, jsonBody(map[string]any{"vote": "down", "comment": "来源过时"}))
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, 1.0, metric("down"))

	// History and the JSONL export carry it.
	status, _, body = e.do("GET", "/api/sessions/"+sess.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"feedback":{"vote":"down","comment":"来源过时"`)
	status, _, body = e.do("GET", "/api/sessions/"+sess.ID+"/export.jsonl", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"feedback":{"vote":"down","comment":"来源过时","by":"`+alice.ID+`"`)

	// Bad input, another user's answer, a question, a missing message.
	userMsg := strconv.FormatUint(out.UserMessageID, 10)
	for _, tc := range []struct {
		token, path, body string
		status            int
	}{
		{tok, path, `{"vote":"sideways"}`, http.StatusBadRequest},
		{tok, path, `{"vote":"up","comment":"` + strings.Repeat("长", maxFeedbackComment+1) + `"}`, http.StatusBadRequest},
		{tok, path, `{"vote":"up","extra":1}`, http.StatusBadRequest},
		{tok, path, `{"vote":"up"} {}`, http.StatusBadRequest},
		{tok, path, ``, http.StatusBadRequest},
		{tok, path, `{"vote":"up","comment":"a\u0007b"}`, http.StatusBadRequest},
		{tok, "/api/messages/" + userMsg + "/feedback", `{"vote":"up"}`, http.StatusBadRequest},
		{bobTok, path, `{"vote":"up"}`, http.StatusNotFound},
		{tok, "/api/messages/999999/feedback", `{"vote":"up"}`, http.StatusNotFound},
		{tok, "/api/messages/abc/feedback", `{"vote":"up"}`, http.StatusNotFound},
	} {
		status, _, body := e.do("PUT", tc.path, tc.token, strings.NewReader(tc.body))
		assert.Equal(t, tc.status, status, "%s %s → %s", tc.path, tc.body, body)
	}
	status, _, _ = e.do("DELETE", path, bobTok, nil)
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "down", metaOf(t, e.st, ans)["feedback"].(map[string]any)["vote"], "bad requests changed nothing")

	// A vote recorded by someone else (an operator reviewing a shared chat, say) is not the
	// owner's to change either.
	require.NoError(t, e.st.MergeMetadata(context.Background(), ans, map[string]json.RawMessage{"feedback": json.RawMessage(`{"vote":"up","by":"someone-else"}`)}))
	status, _, _ = e.do("PUT", path, tok, jsonBody(map[string]any{"vote": "down"}))
	assert.Equal(t, http.StatusNotFound, status)
	require.NoError(t, e.st.MergeMetadata(context.Background(), ans, map[string]json.RawMessage{"feedback": json.RawMessage(`{"vote":"down","by":"` + alice.ID + `"}`)}))

	// Cookie sessions change feedback only from our own origin.
	wsTok, err := e.st.CreateWebSession(context.Background(), alice.ID, time.Hour)
	require.NoError(t, err)
	ck := &http.Cookie{Name: CookieName, Value: wsTok}
	resp, _ := e.send("DELETE", path, hdr("Origin", "https://evil.example"), ck)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = e.send("DELETE", path, hdr("Origin", e.ts.URL), ck)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Nil(t, metaOf(t, e.st, ans)["feedback"])
	status, _, body = e.do("GET", "/api/sessions/"+sess.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.NotContains(t, body, `"feedback"`)
}

func TestRenameDeleteSearch(t *testing.T) {
	e := newEnv(t)
	alice, tok := e.user("alice")
	_, bobTok := e.user("bob")
	ws := e.mustWS(tok)
	frames, q1, a1 := askWS(t, ws, map[string]any{"type": "chat.send", "text": "电子发票抬头写错了"})
	sid := frames[0]["sessionId"].(string)

	// Rename: trimmed, one line; every tab learns it.
	status, _, body := e.do("PATCH", "/api/sessions/"+sid, tok, jsonBody(map[string]any{"title": "  发票\n问题  "}))
	require.Equal(t, http.StatusOK, status, body)
	sess, err := e.st.GetSession(context.Background(), sid)
	require.NoError(t, err)
	assert.Equal(t, "发票 问题", sess.Title)
	f := ws.until("session.updated")
	assert.Equal(t, "发票 问题", f[len(f)-1]["session"].(map[string]any)["title"])
	for _, tc := range []struct {
		token, body string
		status      int
	}{
		{tok, `{"title":""}`, http.StatusBadRequest},
		{tok, `{"title":"` + strings.Repeat("题", maxTitleRunes+1) + `"}`, http.StatusBadRequest},
		{tok, `{"name":"x"}`, http.StatusBadRequest},
		{bobTok, `{"title":"mine now"}`, http.StatusNotFound},
	} {
		status, _, body := e.do("PATCH", "/api/sessions/"+sid, tc.token, strings.NewReader(tc.body))
		assert.Equal(t, tc.status, status, "%s → %s", tc.body, body)
	}
	status, _, _ = e.do("PATCH", "/api/sessions/nope", tok, jsonBody(map[string]any{"title": "x"}))
	assert.Equal(t, http.StatusNotFound, status)

	// Search: titles and conversation text, the caller's chats only, snippets as shown.
	hidden := e.session(alice, "links")
	e.append(store.Message{SessionID: hidden.ID, Role: store.RoleUser, Content: "where is it"})
	e.append(store.Message{SessionID: hidden.ID, Role: store.RoleAssistant, Content: "See http://secret.example/needle for details."})
	type result struct {
		Results []searchResultJSON `json:"results"`
		Trunc   bool               `json:"truncated"`
	}
	search := func(token, q string) (int, result) {
		status, _, body := e.do("GET", "/api/search?q="+urlQuery(q), token, nil)
		var r result
		if status == http.StatusOK {
			require.NoError(t, json.Unmarshal([]byte(body), &r))
		}
		return status, r
	}
	status, r := search(tok, "抬头")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, r.Results, 1)
	assert.Equal(t, sid, r.Results[0].Session.ID)
	assert.False(t, r.Results[0].TitleMatch)
	require.Len(t, r.Results[0].Messages, 2)
	assert.Equal(t, a1, r.Results[0].Messages[0].ID)
	assert.NotContains(t, r.Results[0].Messages[0].Snippet, "[^", "markers are not shown in snippets")
	_, r = search(tok, "发票 问题")
	require.Len(t, r.Results, 1)
	assert.True(t, r.Results[0].TitleMatch)
	_, r = search(tok, "needle")
	assert.Empty(t, r.Results, "a match inside a link the page hides is no match")
	_, r = search(bobTok, "抬头")
	assert.Empty(t, r.Results)
	status, _ = search(tok, "   ")
	assert.Equal(t, http.StatusBadRequest, status)
	status, _, _ = e.do("GET", "/api/search?q=x&limit=0", tok, nil)
	assert.Equal(t, http.StatusBadRequest, status)

	// Delete: shares are revoked and every view of the chat answers not found.
	status, _, body = e.do("POST", "/api/sessions/"+sid+"/shares", tok, nil)
	require.Equal(t, http.StatusCreated, status, body)
	var sh shareJSON
	require.NoError(t, json.Unmarshal([]byte(body), &sh))
	status, _, _ = e.do("GET", "/s/"+sh.Token, "", nil)
	require.Equal(t, http.StatusOK, status)

	status, _, _ = e.do("DELETE", "/api/sessions/"+sid, bobTok, nil)
	assert.Equal(t, http.StatusNotFound, status, "not the caller's")
	status, _, body = e.do("DELETE", "/api/sessions/"+sid, tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, `{"sessionId":"`+sid+`","revokedShares":1}`, body)
	del := ws.until("session.deleted")
	assert.Equal(t, sid, del[len(del)-1]["sessionId"])

	a1s, q1s := strconv.FormatUint(a1, 10), strconv.FormatUint(q1, 10)
	for _, p := range []string{
		"/api/sessions/" + sid + "/messages", "/api/sessions/" + sid + "/export.jsonl", "/api/sessions/" + sid + "/export.md",
		"/api/messages/" + a1s + "/text", "/api/messages/" + q1s + "/text", "/api/messages/" + a1s + "/citations/1/preview",
		"/s/" + sh.Token, "/s/" + sh.Token + "/export.jsonl",
	} {
		status, _, body := e.do("GET", p, tok, nil)
		assert.Equal(t, http.StatusNotFound, status, "%s → %s", p, body)
	}
	status, _, _ = e.do("PUT", "/api/messages/"+a1s+"/feedback", tok, jsonBody(map[string]any{"vote": "up"}))
	assert.Equal(t, http.StatusNotFound, status)
	status, _, body = e.do("GET", "/api/sessions", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.NotContains(t, body, sid)
	status, _, body = e.do("GET", "/api/shares", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.NotContains(t, body, sh.Token)
	_, r = search(tok, "抬头")
	assert.Empty(t, r.Results)
	for _, frame := range []map[string]any{
		{"type": "session.open", "sessionId": sid},
		{"type": "chat.send", "sessionId": sid, "text": "still there?"},
		{"type": "chat.regenerate", "sessionId": sid, "messageId": a1},
	} {
		ws.send(frame)
		f := ws.next()
		assert.Equal(t, CodeNotFound, f["code"], "%v → %v", frame, f)
	}
	status, _, _ = e.do("DELETE", "/api/sessions/"+sid, tok, nil)
	assert.Equal(t, http.StatusNotFound, status)
}

func urlQuery(s string) string {
	r := strings.NewReplacer(" ", "+", "&", "%26", "#", "%23")
	return r.Replace(s)
}

// answerFixture is a stored answer exercising every rule of the answer text: kept markers (with
// display numbers differing from registry numbers), a dropped one, adjacent ones, a marker in
// code, a verified link, an unverified bare URL and an unverified markdown link.
func answerFixture(t *testing.T, e *testEnv, u store.User) (store.Session, store.Message) {
	t.Helper()
	sess := e.session(u, "年假 [规则]")
	e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "年假怎么算？"})
	content := "年假按工龄计算[^2^][^5^]，见 https://hr.example/leave 。\n\n" +
		"代码 `[^2^]` 原样；伪造[^9^]不显示；[外链](https://evil.example/x) 与 https://evil.example/y 隐藏。"
	meta := `{"citations":[{"n":2,"url":"https://hr.example/annual","title":"年假 *规定*"},{"n":5,"url":"https://kb.example/a b","title":""}],` +
		`"links":{"hidden":2,"allowed":["https://hr.example/leave"]},"feedback":{"vote":"up","comment":"准确","by":"` + u.ID + `","at":"2026-12-01T00:00:00Z"}}`
	ans := e.append(store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: content, Metadata: json.RawMessage(meta)})
	return sess, ans
}

func TestCopyTextAndMarkdownExport(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	e := newEnv(t, func(c *Config, _ *agentCfg) { c.Now = func() time.Time { return now } })
	alice, tok := e.user("alice")
	_, bobTok := e.user("bob")
	sess, ans := answerFixture(t, e, alice)

	status, _, body := e.do("GET", "/api/messages/"+strconv.FormatUint(ans.ID, 10)+"/text?lang=zh", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	var ct struct{ Text string }
	require.NoError(t, json.Unmarshal([]byte(body), &ct))
	assert.Equal(t, "年假按工龄计算[1][2]，见 https://hr.example/leave 。\n\n"+
		"代码 `[^2^]` 原样；伪造不显示；外链 与 〔链接未经核实，已隐藏〕 隐藏。\n\n"+
		"来源：\n[1] 年假 *规定* — https://hr.example/annual\n[2] https://kb.example/a b\n", ct.Text)
	status, _, _ = e.do("GET", "/api/messages/"+strconv.FormatUint(ans.ID, 10)+"/text", bobTok, nil)
	assert.Equal(t, http.StatusNotFound, status)

	status, hdr, body := e.do("GET", "/api/sessions/"+sess.ID+"/export.md?lang=zh", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "text/markdown; charset=utf-8", hdr.Get("Content-Type"))
	assert.Contains(t, hdr.Get("Content-Disposition"), `attachment; filename="citegate-`)
	created := mdTime(ans.CreatedAt)
	assert.Equal(t, "# 年假 \\[规则\\]\n\n"+
		"citegate · 导出于 2026-12-01 03:00 UTC · 2 条消息\n"+
		"\n---\n\n### 用户 · "+created+"\n\n年假怎么算？\n"+
		"\n---\n\n### 助手 · "+created+"\n\n"+
		"年假按工龄计算¹,²，见 https://hr.example/leave 。\n\n"+
		"代码 `[^2^]` 原样；伪造不显示；外链 与 〔链接未经核实，已隐藏〕 隐藏。\n"+
		"\n**来源**\n\n1. [年假 \\*规定\\*](<https://hr.example/annual>)\n2. [https://kb.example/a b](<https://kb.example/a%20b>)\n"+
		"\n*反馈: 有帮助 — 准确*\n", body)
	assert.NotContains(t, body, "evil.example")

	status, _, body = e.do("GET", "/api/sessions/"+sess.ID+"/export.md?lang=en", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "**Sources**")
	assert.Contains(t, body, "### Assistant · ")
	status, _, _ = e.do("GET", "/api/sessions/"+sess.ID+"/export.md", bobTok, nil)
	assert.Equal(t, http.StatusNotFound, status)
}

func TestAnswerBodyNumbers(t *testing.T) {
	cits := []citations.Citation{{N: 1, URL: "https://a.example/"}, {N: 3, URL: "https://b.example/"}}
	for _, tc := range []struct{ in, want string }{
		{"a[^1^][^3^]", "a¹,²"},
		{"a[^1^][^7^][^3^]", "a¹,²"},
		{"a[^1^] b[^3^]", "a¹ b²"},
		{"a[^3^][^3^]", "a²,²"},
		{"```\n[^1^]\n```", "```\n[^1^]\n```"},
		{"[^12^]x", "x"},
	} {
		assert.Equal(t, tc.want, answerBody(tc.in, cits, nil, superNumber, ","), tc.in)
	}
	assert.Equal(t, "¹⁰", superNumber(10))
}

// TestDeleteChatWhileRunning deletes a chat whose answer is streaming: the run is cancelled, and
// nothing it would still write (tool results, the partial answer, the run record) comes back.
func TestDeleteChatWhileRunning(t *testing.T) {
	hold := make(chan struct{})
	e := newEnv(t, func(_ *Config, a *agentCfg) {
		a.Model = &scriptedModel{hold: hold, answer: func(q string, _ []string) string { return "一个很长的回答，" + q + "。[^1^]" }}
	})
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "年假怎么算"})
	var sid, runID string
	for _, f := range ws.until("answer.delta") {
		if f["type"] == "run.started" {
			sid, runID = f["sessionId"].(string), f["runId"].(string)
		}
	}
	require.NotEmpty(t, runID)
	status, _, body := e.do("DELETE", "/api/sessions/"+sid, tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	close(hold)

	// The run ends (cancelled, or failed on its next write); bounded wait only against a hang.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, m := e.do("GET", "/metrics", "", nil)
		if strings.Contains(m, `citegate_runs_total{channel="desktop",phase="CANCELLED"} 1`) ||
			strings.Contains(m, `citegate_runs_total{channel="desktop",phase="FAILED"} 1`) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the run did not end:\n%s", m)
		time.Sleep(20 * time.Millisecond)
	}
	_, err := e.st.GetRun(context.Background(), runID)
	require.ErrorIs(t, err, store.ErrNotFound, "the run record is not written back")
	rm, err := e.st.ListRunMessages(context.Background(), runID)
	require.NoError(t, err)
	assert.Empty(t, rm, "no message of the run is left")
	_, err = e.st.GetSession(context.Background(), sid)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestSessionOpenDeletedElsewhere opens a chat that was deleted behind this connection's back
// (another replica served the DELETE, so this one still has the owner cached): the answer is
// not_found, as for any missing chat, not an internal error.
func TestSessionOpenDeletedElsewhere(t *testing.T) {
	e := newEnv(t)
	alice, tok := e.user("alice")
	sess := e.session(alice, "t")
	e.append(store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q"})
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "session.open", "sessionId": sess.ID})
	ws.until("session.history")
	_, err := e.st.DeleteChat(context.Background(), sess.ID, alice.ID)
	require.NoError(t, err)
	ws.send(map[string]any{"type": "session.open", "sessionId": sess.ID})
	f := ws.next()
	assert.Equal(t, "error", f["type"])
	assert.Equal(t, CodeNotFound, f["code"])
}

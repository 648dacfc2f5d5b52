package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

const evilHost = "evil.example.com"

// TestLinkRuleLiveAnswer: a model writes an unverified markdown link and an unverified bare URL
// beside a link to the source it cites. Neither unverified URL reaches a person through the
// gateway — answer.final and citations HTML, session.history, REST messages, the share page and
// its export — while the verified link keeps working everywhere.
func TestLinkRuleLiveAnswer(t *testing.T) {
	answer := "请看[官网](https://evil.example.com/login)，或访问 https://evil.example.com/x 。" +
		"详见[手册](https://example.com/a)[^1^]。"
	e := newEnv(t, func(_ *Config, a *agentCfg) {
		a.Model = &scriptedModel{answer: func(string, []string) string { return answer }}
	})
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "年假怎么申请"})
	frames := ws.until("run.finished")
	var sid string
	htmls := map[string]string{}
	for _, f := range frames {
		if s, ok := f["sessionId"].(string); ok && sid == "" {
			sid = s
		}
		if h, ok := f["html"].(string); ok {
			htmls[f["type"].(string)] = h
		}
	}
	require.Contains(t, htmls, "answer.final")
	require.Contains(t, htmls, "citations")

	check := func(where, html string) {
		t.Helper()
		assert.NotContains(t, html, evilHost, where)
		assert.Contains(t, html, "请看官网", where+": the link's text stays")
		assert.Contains(t, html, citations.HiddenLinkNotice, where+": the bare URL becomes the notice")
		assert.Contains(t, html, `href="https://example.com/a"`, where+": the verified link works")
	}
	// The answer, its citations and its link decision commit together, so answer.final already
	// renders under the full rule: the verified link works, the unverified ones are gone.
	check("answer.final", htmls["answer.final"])
	var streamed strings.Builder
	for _, f := range frames {
		if f["type"] == "answer.delta" {
			streamed.WriteString(f["text"].(string))
		}
	}
	assert.NotContains(t, streamed.String(), evilHost, "answer.delta never shows an unverified URL")
	assert.Contains(t, streamed.String(), citations.HiddenLinkNotice)
	_, _, metricsBody := e.do("GET", "/metrics", "", nil)
	assert.Equal(t, 2.0, metricValue(t, metricsBody, `citegate_links_hidden_total{channel="desktop",model="`+e.ag.ModelName()+`"}`))
	check("citations", htmls["citations"])

	ws.send(map[string]any{"type": "session.open", "sessionId": sid})
	hist := ws.until("session.history")
	msgs := hist[len(hist)-1]["messages"].([]any)
	require.Len(t, msgs, 2)
	check("session.history", msgs[1].(map[string]any)["html"].(string))

	status, _, body := e.do("GET", "/api/sessions/"+sid+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status)
	var rest struct {
		Messages []messageJSON `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &rest))
	require.Len(t, rest.Messages, 2)
	check("REST messages", rest.Messages[1].HTML)

	sh := e.createShare(tok, sid)
	check("share page", mustGet(t, e, "/s/"+sh.Token, ""))
	export := mustGet(t, e, "/s/"+sh.Token+"/export.jsonl", "")
	assert.NotContains(t, export, evilHost, "share export")
	assert.Contains(t, export, "[手册](https://example.com/a)[^1^]", "share export keeps verified links and markers")

	// The owner's own export is the record: the raw text, unverified URLs included.
	assert.Contains(t, mustGet(t, e, "/api/sessions/"+sid+"/export.jsonl", tok), evilHost)
}

// TestLinkRuleFromStoredRecord: the rule comes from the stored answer, metadata.links.allowed (a
// URL the run saw in a tool result, not a citation) and the citations' URLs; a message without
// metadata.links allows its citations' URLs only.
func TestLinkRuleFromStoredRecord(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "stored")
	e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "我的链接 https://mine.example.org/q"})
	content := "流程见 https://kb.example.com/leave ，[登录](https://evil.example.com/a) https://evil.example.com/b 。" +
		"`https://code.example.com/literal` 来源[^1^]"
	e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: content,
		Metadata: json.RawMessage(`{"citations":[{"n":1,"url":"https://example.com/a","title":"A"}],` +
			`"links":{"hidden":2,"allowed":["https://kb.example.com/leave"]}}`)})
	e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "再问"})
	e.append(store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: content}) // no metadata.links

	status, _, body := e.do("GET", "/api/sessions/"+s.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status)
	var rest struct {
		Messages []messageJSON `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &rest))
	require.Len(t, rest.Messages, 4)
	assert.Contains(t, rest.Messages[0].HTML, "https://mine.example.org/q", "the user's own text is shown as typed")
	with, without := rest.Messages[1].HTML, rest.Messages[3].HTML
	assert.Contains(t, with, `href="https://kb.example.com/leave"`)
	assert.NotContains(t, without, "kb.example.com", "no metadata.links: only citation URLs")
	for _, h := range []string{with, without} {
		assert.NotContains(t, h, evilHost)
		assert.Contains(t, h, "登录")
		assert.Contains(t, h, "<code>https://code.example.com/literal</code>", "code is literal")
	}

	sh := e.createShare(tok, s.ID)
	page := mustGet(t, e, "/s/"+sh.Token, "")
	assert.Contains(t, page, `href="https://kb.example.com/leave"`)
	assert.NotContains(t, page, evilHost)
	assert.Equal(t, 3, strings.Count(page, citations.HiddenLinkNotice), "one bare URL in the first answer, two in the second")
	export := mustGet(t, e, "/s/"+sh.Token+"/export.jsonl", "")
	assert.NotContains(t, export, evilHost)
	assert.Contains(t, export, "https://kb.example.com/leave")
}

package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

// kbEnv is a gateway whose search answers from "the corpus" at the server's own address, as the
// bundled knowledge base does, with SiteName naming those pages by document title.
func kbEnv(t *testing.T) *testEnv {
	t.Helper()
	const kb = "http://127.0.0.1:8080/kb/"
	return newEnv(t, func(c *Config, a *agentCfg) {
		c.SiteName = func(u string) string {
			if strings.HasPrefix(u, kb) {
				return "员工手册 · " + strings.TrimPrefix(u, kb)
			}
			return ""
		}
		a.Tools = []agent.Tool{fixedSearch{result: func(q string) string {
			return searchResult(q, [3]string{"年假规定", kb + "annual-leave", "## 年假天数\n\n| 工龄 | 天数 |\n| --- | --- |\n| 1-10 年 | 5 天 |"})
		}}}
	})
}

// TestSiteNameForCorpusSources: a source on the server's own /kb/ pages shows its document's name
// as its site, on the desktop (history and REST) and on the share page, never "127.0.0.1"; the
// desktop's sources list also carries the source card's retrieval time and lead.
func TestSiteNameForCorpusSources(t *testing.T) {
	e := kbEnv(t)
	u, tok := e.user("alice")
	sess := e.session(u, "年假")
	out := e.runTurn(sess.ID, "年假几天")
	require.Equal(t, store.PhaseCompleted, out.Phase)

	status, _, body := e.do("GET", "/api/sessions/"+sess.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	var doc struct {
		Messages []struct {
			Role      string `json:"role"`
			HTML      string `json:"html"`
			Citations []struct {
				Lead string `json:"lead"`
			} `json:"citations"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Len(t, doc.Messages, 2)
	answer := doc.Messages[1]
	assert.Contains(t, answer.HTML, `<span class="src-domain">员工手册 · annual-leave</span>`)
	assert.NotContains(t, answer.HTML, `127.0.0.1</span>`)
	assert.Contains(t, answer.HTML, `<time class="src-time" datetime="`)
	assert.Contains(t, answer.HTML, "<span class=\"src-lead\">年假天数\n工龄 · 天数\n1-10 年 · 5 天</span>")
	require.Len(t, answer.Citations, 1)
	assert.Equal(t, "年假天数\n工龄 · 天数\n1-10 年 · 5 天", answer.Citations[0].Lead, "the record carries the lead")

	status, _, body = e.do("POST", "/api/sessions/"+sess.ID+"/shares", tok, nil)
	require.Equal(t, http.StatusCreated, status, body)
	var sh struct{ Token string }
	require.NoError(t, json.Unmarshal([]byte(body), &sh))
	status, _, page := e.do("GET", "/s/"+sh.Token, "", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, `<span class="src-domain">员工手册 · annual-leave</span>`)
	assert.NotContains(t, page, `127.0.0.1</span>`)
	assert.NotContains(t, page, "src-lead", "the card data is the desktop's")
}

// TestPreviewRendersExcerpt: the excerpt panel gets the excerpt as sanitised HTML (a heading and a
// table, not "##" and "| --- |") and the source's site name.
func TestPreviewRendersExcerpt(t *testing.T) {
	e := kbEnv(t)
	u, tok := e.user("alice")
	sess := e.session(u, "年假")
	out := e.runTurn(sess.ID, "年假几天")
	require.Equal(t, store.PhaseCompleted, out.Phase)
	status, _, body := e.do("GET", "/api/messages/"+itoa(int(out.FinalMessageID))+"/citations/1/preview", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	var p struct {
		Excerpt     string `json:"excerpt"`
		ExcerptHTML string `json:"excerptHtml"`
		Site        string `json:"site"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	assert.Contains(t, p.Excerpt, "## 年假天数", "the raw text is still there for copying")
	assert.Contains(t, p.ExcerptHTML, "<h2>年假天数</h2>")
	assert.Contains(t, p.ExcerptHTML, "<td>5 天</td>")
	assert.NotContains(t, p.ExcerptHTML, "---")
	assert.Equal(t, "员工手册 · annual-leave", p.Site)
}

// TestHistoryCarriesToolLines: the tool lines a live run shows ("已搜索 …", "已阅读网页 …") come
// back with the answer when the chat is reopened, over the websocket and the REST history, each
// with its arguments and whether it worked.
func TestHistoryCarriesToolLines(t *testing.T) {
	e := newEnv(t)
	e.model.calls = func(q string) []store.ToolCall {
		return []store.ToolCall{
			{ID: "call_s", Name: "web_search", Arguments: `{"query":"` + q + `","extra":"not shown"}`},
			// No such tool is configured: the agent records an error result for it.
			{ID: "call_o", Name: "open_web_page", Arguments: `{"url":"https://example.com/a"}`},
		}
	}
	u, tok := e.user("alice")
	sess := e.session(u, "tools")
	out := e.runTurn(sess.ID, "年假几天")
	require.Equal(t, store.PhaseCompleted, out.Phase)

	want := []toolLineJSON{
		{CallID: "call_s", Tool: "web_search", Arguments: `{"query":"年假几天"}`, OK: true},
		{CallID: "call_o", Tool: "open_web_page", Arguments: `{"url":"https://example.com/a"}`, OK: false},
	}
	type msg struct {
		Role  string         `json:"role"`
		Tools []toolLineJSON `json:"tools"`
	}

	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "session.open", "sessionId": sess.ID})
	h := ws.next()
	require.Equal(t, "session.history", h["type"])
	raw, err := json.Marshal(h["messages"])
	require.NoError(t, err)
	var msgs []msg
	require.NoError(t, json.Unmarshal(raw, &msgs))
	require.Len(t, msgs, 2)
	assert.Empty(t, msgs[0].Tools, "the question has none")
	assert.Equal(t, want, msgs[1].Tools)

	status, _, body := e.do("GET", "/api/sessions/"+sess.ID+"/messages", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	var doc struct{ Messages []msg }
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Len(t, doc.Messages, 2)
	assert.Equal(t, want, doc.Messages[1].Tools)
}

func TestToolLabelArgs(t *testing.T) {
	assert.Equal(t, `{"query":"q"}`, toolLabelArgs(`{"query":"q","n":3}`))
	assert.Equal(t, `{}`, toolLabelArgs(`{"n":3}`))
	assert.Equal(t, "", toolLabelArgs(`not json`))
	long := strings.Repeat("长", maxToolArg+10)
	assert.Equal(t, `{"url":"`+strings.Repeat("长", maxToolArg)+`"}`, toolLabelArgs(`{"url":"`+long+`"}`))
	assert.True(t, hasErrorKey(`{"error":"x"}`))
	assert.True(t, hasErrorKey(`{"\u0065rror":"x"}`))
	assert.False(t, hasErrorKey(`{"content":"no error here"}`))
	assert.False(t, hasErrorKey(`[{"error":1}]`))
}

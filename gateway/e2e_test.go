package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/agent/tools"
)

// extractiveEnv is the offline default: the extractive model over the bundled corpus, whose pages
// are served at /kb/ by the same server.
func extractiveEnv(t *testing.T) *testEnv {
	t.Helper()
	return newEnv(t, func(c *Config, a *agentCfg) {
		corpus, err := tools.LoadCorpus("", c.PublicURL)
		require.NoError(t, err)
		c.KB = corpus.Handler()
		a.Model = extractive.New()
		a.Tools = []agent.Tool{tools.NewWebSearch(corpus, nil)}
	})
}

func TestExtractiveEndToEnd(t *testing.T) {
	e := extractiveEnv(t)
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "电子发票抬头写错了怎么办？"})
	frames := ws.until("run.finished")
	require.Equal(t, "COMPLETED", frames[len(frames)-1]["phase"])
	cf := frames[len(frames)-2]
	require.Equal(t, "citations", cf["type"], "the invoice question is answered with verified citations")
	cits := cf["citations"].([]any)
	require.NotEmpty(t, cits)
	first := cits[0].(map[string]any)
	url := first["url"].(string)
	require.True(t, strings.HasPrefix(url, e.srv.cfg.PublicURL+"/kb/"), url)
	assert.Contains(t, cf["html"], "来源")

	// The cited corpus page is served by this server.
	status, _, page := e.do("GET", strings.TrimPrefix(url, e.srv.cfg.PublicURL), "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, "红冲")

	// The preview returns the passage the model was given.
	mid := itoa(int(cf["messageId"].(float64)))
	n := itoa(int(first["n"].(float64)))
	status, _, body := e.do("GET", "/api/messages/"+mid+"/citations/"+n+"/preview", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	assert.Equal(t, url, p["url"])
	assert.Equal(t, "web_search", p["tool"])
	assert.NotEmpty(t, p["excerpt"])
	sid := cf["sessionId"].(string)
	msgs, err := e.st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	found := false
	for _, m := range msgs {
		if m.ToolName == "web_search" {
			found = strings.Contains(m.Content, mustJSONString(p["excerpt"].(string)))
		}
	}
	assert.True(t, found, "the excerpt is the stored tool result's content")
}

func mustJSONString(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}

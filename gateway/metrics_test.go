package gateway

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+)$`)
	m := re.FindStringSubmatch(body)
	require.NotNil(t, m, "series %s missing in\n%s", series, body)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, func(_ *Config, a *agentCfg) {
		a.Model = &scriptedModel{answer: func(string, []string) string { return "甲。[^1^] 乙。[^1^] 伪。[^8^]" }}
	})
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "问题"})
	ws.until("run.finished")

	status, hdr, body := e.do("GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, hdr.Get("Content-Type"), "text/plain")
	assert.Equal(t, 1.0, metricValue(t, body, `citegate_runs_total{channel="desktop",phase="COMPLETED"}`))
	assert.Equal(t, 3.0, metricValue(t, body, `citegate_citation_markers_total{result="seen"}`))
	assert.Equal(t, 2.0, metricValue(t, body, `citegate_citation_markers_total{result="kept"}`))
	assert.Equal(t, 1.0, metricValue(t, body, `citegate_citation_markers_total{result="dropped"}`))
	assert.Equal(t, 1.0, metricValue(t, body, `citegate_citations_per_answer_count`))
	assert.Equal(t, 1.0, metricValue(t, body, `citegate_citations_per_answer_sum`), "one distinct citation")
	assert.Equal(t, 1.0, metricValue(t, body, `citegate_websocket_clients`))
	assert.Greater(t, metricValue(t, body, `citegate_answer_delta_latency_seconds_count`), 0.0)
	assert.Contains(t, body, "# TYPE citegate_store_errors_total counter")

	ws.c.Close()
	assert.Eventually(t, func() bool {
		_, _, body := e.do("GET", "/metrics", "", nil)
		return metricValue(t, body, `citegate_websocket_clients`) == 0
	}, 5e9, 1e7)
}

func TestHealthz(t *testing.T) {
	e := newEnv(t)
	status, hdr, body := e.do("GET", "/healthz", "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
	assert.JSONEq(t, `{"status":"ok"}`, body)
	for _, path := range []string{"/healthz", "/", "/s/unknown"} {
		_, hdr, _ := e.do("GET", path, "", nil)
		assert.Equal(t, "DENY", hdr.Get("X-Frame-Options"), path)
		assert.Equal(t, "frame-ancestors 'none'", hdr.Get("Content-Security-Policy"), path)
		assert.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"), path)
	}

	require.NoError(t, e.st.Close())
	status, _, body = e.do("GET", "/healthz", "", nil)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "unavailable")
	_, _, m := e.do("GET", "/metrics", "", nil)
	assert.Equal(t, 1.0, metricValue(t, m, `citegate_store_errors_total{op="ping"}`))
}

func TestMountedHandlers(t *testing.T) {
	kb := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("kb:" + r.URL.Path)) })
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hook:" + r.Method)) })
	e := newEnv(t, func(c *Config, _ *agentCfg) {
		c.KB = kb
		c.Webhooks = map[string]http.Handler{"/channels/wechat": hook, "/channels/feishu/events": hook}
	})
	status, _, body := e.do("GET", "/kb/einvoice", "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "kb:/kb/einvoice", body)
	status, _, body = e.do("POST", "/channels/wechat", "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "hook:POST", body)
	status, _, body = e.do("GET", "/channels/feishu/events", "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "hook:GET", body)
	status, hdr, _ := e.do("GET", "/assets/core.js", "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, hdr.Get("Content-Type"), "javascript")

	// Without a KB, /kb/ is a plain 404.
	e2 := newEnv(t)
	status, _, _ = e2.do("GET", "/kb/x", "", nil)
	assert.Equal(t, http.StatusNotFound, status)
}

func TestNewValidatesConfig(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		cfg  Config
	}{
		{"no store", Config{Agent: e.ag, Addr: "127.0.0.1:1"}},
		{"no agent", Config{Store: e.st, Addr: "127.0.0.1:1"}},
		{"no address", Config{Store: e.st, Agent: e.ag}},
		{"bad public url", Config{Store: e.st, Agent: e.ag, PublicURL: "ftp://x"}},
		{"bad origin", Config{Store: e.st, Agent: e.ag, Addr: "127.0.0.1:1", AllowedOrigins: []string{"not a url"}}},
		{"registry reused", Config{Store: e.st, Agent: e.ag, Addr: "127.0.0.1:1", Registry: e.reg}},
		{"webhook clashes with a route", Config{Store: e.st, Agent: e.ag, Addr: "127.0.0.1:1", KB: http.NotFoundHandler(), Webhooks: map[string]http.Handler{"/kb/": http.NotFoundHandler()}}},
		{"webhook path not absolute", Config{Store: e.st, Agent: e.ag, Addr: "127.0.0.1:1", Webhooks: map[string]http.Handler{"channels/x": http.NotFoundHandler()}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg)
			assert.Error(t, err)
		})
	}
}

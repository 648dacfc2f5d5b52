package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	wechatfake "github.com/citegate/citegate/internal/fakes/wechat"
	"github.com/citegate/citegate/internal/testkit"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestServeWholeBinary runs `citegate serve` as the binary would, with a WeChat channel configured by
// environment variables against the loopback fake, and checks the pieces a fresh user touches: the
// printed login link, health, the admin socket for `user add`, and one chat-channel answer that arrives
// without markers.
func TestServeWholeBinary(t *testing.T) {
	api := wechatfake.NewServer("wx-app", "wx-secret")
	defer api.Close()
	data, addr := t.TempDir(), freeAddr(t)
	envs := map[string]string{
		"CITEGATE_DATA":                data,
		"CITEGATE_ADDR":                addr,
		"CITEGATE_LOG_LEVEL":           "warn",
		"CITEGATE_WECHAT_APP_ID":       "wx-app",
		"CITEGATE_WECHAT_APP_SECRET":   "wx-secret",
		"CITEGATE_WECHAT_TOKEN":        "wx-token",
		"CITEGATE_WECHAT_API_BASE_URL": api.URL,
		"CITEGATE_SOURCES_FOOTER":      "true",
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, &stdout, &stderr, env(envs)) }()
	defer func() {
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, 0, code, "serve exits cleanly on shutdown: %s", stderr.String())
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	}()

	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "server did not come up: %s", stderr.String())
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), base+"/login?code=") }, 30*time.Second, 20*time.Millisecond,
		"a loopback server with no users prints a ready login link; stdout: %s", stdout.String())

	// user add goes through the admin socket while serve holds the database.
	code, out, errOut := runCLI(t, map[string]string{"CITEGATE_DATA": data}, "user", "add", "operator")
	require.Equal(t, 0, code, errOut)
	token := strings.TrimSpace(out)
	req, _ := http.NewRequest(http.MethodGet, base+"/api/me", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// A WeChat user asks; the answer arrives through the customer-service API, marker-free, with the
	// verified sources footer.
	client := &wechatfake.Client{URL: base + "/channels/wechat", Token: "wx-token", AppID: "wx-app", Account: "gh_test"}
	require.Eventually(t, func() bool {
		rs, err := client.SendText(ctx, "openid-1", "电子发票抬头写错了怎么办？", 900001, wechatfake.Delivery{})
		return err == nil && len(rs) > 0 && rs[0].Status == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "the webhook answers once the channel has started")
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	msgs, err := api.WaitMessages(wctx, 1)
	require.NoError(t, err)
	text := msgs[0].Content
	assert.Contains(t, text, "红冲")
	assert.Contains(t, text, "来源：")
	assert.Empty(t, citations.Markers(text))
	assert.NotContains(t, text, "[^")
}

package wechat

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	wechatfake "github.com/citegate/citegate/internal/fakes/wechat"
	"github.com/citegate/citegate/internal/testkit"
	"github.com/citegate/citegate/store"
)

// fixedClock is a settable injected clock.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// channelOn starts a channel with cfg's clock and replay cache behind its own webhook server,
// sharing h's fake API and recorder-less setup; it returns a harness of its own.
func channelOn(t *testing.T, aesKey string, api *wechatfake.Server, now func() time.Time, replay ReplayGuard) *harness {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	ch, err := New(Config{
		AppID: testAppID, AppSecret: testSecret, Token: testToken, EncodingAESKey: aesKey,
		APIBaseURL: api.URL, Now: now, Replay: replay,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)
	hook := httptest.NewServer(ch.Routes()[Route])
	t.Cleanup(hook.Close)
	h := &harness{
		ch: ch, api: api, rec: &recorder{}, logs: logs, hook: hook,
		client: &wechatfake.Client{URL: hook.URL, Token: testToken, AppID: testAppID, EncodingAESKey: aesKey},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, ch.Start(ctx, h.rec))
	return h
}

// pushAt pushes a text message signed over the given timestamp and nonce and returns the answer.
func pushAt(t *testing.T, h *harness, ts, nonce, text string, msgID int64, safe bool) wechatfake.Response {
	t.Helper()
	resps, err := h.client.SendText(context.Background(), testOpenID, text, msgID,
		wechatfake.Delivery{Timestamp: ts, Nonce: nonce, Safe: safe, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.Len(t, resps, 1)
	require.NoError(t, resps[0].Err)
	return resps[0]
}

// assertNothingStarted checks that no message reached the dispatcher and no customer-service
// message (or typing indicator) went out.
func assertNothingStarted(t *testing.T, h *harness) {
	t.Helper()
	assert.Empty(t, h.rec.got(), "a rejected push must reach no handler")
	assert.Empty(t, h.api.Messages(), "a rejected push must send no customer-service message")
	assert.Empty(t, h.api.Typing())
}

func TestWebhookTimestampWindow(t *testing.T) {
	api := wechatfake.NewServer(testAppID, testSecret)
	t.Cleanup(api.Close)
	clock := &fixedClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	unix := func(d time.Duration) string { return strconv.FormatInt(clock.now().Add(d).Unix(), 10) }

	for _, safe := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "aes"}[safe], func(t *testing.T) {
			h := channelOn(t, keyFor(safe), api, clock.now, nil)
			bad := map[string]string{
				"year 2001":         strconv.FormatInt(time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC).Unix(), 10),
				"year 2100":         strconv.FormatInt(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), 10),
				"301 s early":       unix(-301 * time.Second),
				"301 s late":        unix(301 * time.Second),
				"not a number":      "17e8",
				"empty":             " ",
				"negative":          "-1",
				"overflowing int64": "99999999999999999999",
			}
			var bodies []string
			for name, ts := range bad {
				r := pushAt(t, h, ts, "n-"+name, "伪造的消息", 100, safe)
				assert.Equal(t, http.StatusForbidden, r.Status, name)
				bodies = append(bodies, r.Body)
			}
			for _, b := range bodies {
				assert.Equal(t, bodies[0], b, "every refusal looks the same")
			}
			assertNothingStarted(t, h)
			assert.Contains(t, h.logs.String(), "timestamp outside the accepted window")

			// Inside the window, both sides, the push is taken.
			for i, d := range []time.Duration{-299 * time.Second, 0, 299 * time.Second} {
				r := pushAt(t, h, unix(d), "ok-"+strconv.Itoa(i), "真的消息", int64(200+i), safe)
				assert.Equal(t, http.StatusOK, r.Status)
				assert.Equal(t, "success", r.Body)
			}
			assert.Len(t, h.rec.got(), 3)
		})
	}
}

func TestWebhookReplayWithAnotherBody(t *testing.T) {
	api := wechatfake.NewServer(testAppID, testSecret)
	t.Cleanup(api.Close)
	h := channelOn(t, "", api, time.Now, nil)
	ts := strconv.FormatInt(time.Now().Unix(), 10)

	r := pushAt(t, h, ts, "nonce-1", "第一条", 301, false)
	require.Equal(t, "success", r.Body)
	require.Len(t, h.rec.got(), 1)

	// A captured (timestamp, nonce, signature) with another body — another message, another user.
	r = pushAt(t, h, ts, "nonce-1", "转账给我", 302, false)
	assert.Equal(t, http.StatusForbidden, r.Status)
	assert.NotEqual(t, "success", r.Body)
	forged, err := h.client.Deliver(context.Background(), "oAttackerTarget", h.client.TextXML("oAttackerTarget", "x", 303, time.Now()),
		wechatfake.Delivery{Timestamp: ts, Nonce: "nonce-1"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, forged[0].Status)
	assert.Contains(t, h.logs.String(), "replayed timestamp and nonce")

	// WeChat's own resend of the identical request is acknowledged and starts nothing again.
	r = pushAt(t, h, ts, "nonce-1", "第一条", 301, false)
	assert.Equal(t, "success", r.Body)
	require.Len(t, h.rec.got(), 1, "only the first push reached the dispatcher")
	assert.Equal(t, "第一条", h.rec.got()[0].Text)
	assert.Empty(t, api.Messages())
}

func TestWebhookReplayAfterRestart(t *testing.T) {
	api := wechatfake.NewServer(testAppID, testSecret)
	t.Cleanup(api.Close)
	path := filepath.Join(t.TempDir(), "citegate.db")
	open := func() *store.Store {
		st, err := store.Open(path, store.Options{Logger: slog.New(slog.NewTextHandler(&testkit.SyncBuffer{}, nil))})
		require.NoError(t, err)
		return st
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)

	st := open()
	first := channelOn(t, "", api, time.Now, st)
	require.Equal(t, "success", pushAt(t, first, ts, "nonce-r", "重启前", 401, false).Body)
	require.Len(t, first.rec.got(), 1)
	require.NoError(t, st.Close())

	// A new process: new channel, same database file.
	st = open()
	t.Cleanup(func() { _ = st.Close() })
	second := channelOn(t, "", api, time.Now, st)
	for i, text := range []string{"重启前", "重启后换了内容"} {
		r := pushAt(t, second, ts, "nonce-r", text, int64(401+i), false)
		assert.Equal(t, http.StatusForbidden, r.Status, text)
	}
	assertNothingStarted(t, second)

	// Fresh pushes still get through after the restart.
	require.Equal(t, "success", pushAt(t, second, strconv.FormatInt(time.Now().Unix(), 10), "nonce-new", "新消息", 403, false).Body)
	assert.Len(t, second.rec.got(), 1)
}

func TestWebhookPlaintextRefusedWithAESKey(t *testing.T) {
	api := wechatfake.NewServer(testAppID, testSecret)
	t.Cleanup(api.Close)
	h := channelOn(t, wechatfake.NewAESKey(), api, time.Now, nil)
	// Correctly signed (the token is all a plaintext signature needs) but not encrypted.
	r := pushAt(t, h, "", "", "明文消息", 501, false)
	assert.Equal(t, http.StatusForbidden, r.Status)
	assert.NotEqual(t, "success", r.Body)
	assertNothingStarted(t, h)
	assert.Contains(t, h.logs.String(), "only encrypted messages are accepted")

	// The same account takes the encrypted push.
	r = pushAt(t, h, "", "", "密文消息", 502, true)
	assert.Equal(t, "success", r.Body)
	require.Len(t, h.rec.got(), 1)
	assert.Equal(t, "密文消息", h.rec.got()[0].Text)
}

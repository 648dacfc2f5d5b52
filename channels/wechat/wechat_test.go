package wechat

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/citations"
	wechatfake "github.com/citegate/citegate/internal/fakes/wechat"
	"github.com/citegate/citegate/internal/testkit"
)

const (
	testAppID  = "wx0123456789abcdef"
	testSecret = "s3cr3t-app-secret-value"
	testToken  = "callback-token"
	testOpenID = "oUser-openid-1"
)

// recorder is a channels.Handler that keeps what it receives.
type recorder struct {
	mu   sync.Mutex
	msgs []channels.Message
}

func (r *recorder) HandleMessage(_ context.Context, m channels.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
}

func (r *recorder) got() []channels.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]channels.Message(nil), r.msgs...)
}

type harness struct {
	ch     *Channel
	api    *wechatfake.Server
	client *wechatfake.Client
	rec    *recorder
	logs   *testkit.SyncBuffer
	hook   *httptest.Server
}

// newHarness starts the fake API, a channel pointed at it, and a webhook server; aesKey "" means
// plain mode only.
func newHarness(t *testing.T, aesKey string, start bool) *harness {
	t.Helper()
	api := wechatfake.NewServer(testAppID, testSecret)
	t.Cleanup(api.Close)
	logs := &testkit.SyncBuffer{}
	ch, err := New(Config{
		AppID: testAppID, AppSecret: testSecret, Token: testToken, EncodingAESKey: aesKey,
		APIBaseURL: api.URL,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)
	ch.api.backoff = time.Millisecond
	mux := http.NewServeMux()
	for p, h := range ch.Routes() {
		mux.Handle(p, h)
	}
	hook := httptest.NewServer(mux)
	t.Cleanup(hook.Close)
	h := &harness{
		ch: ch, api: api, rec: &recorder{}, logs: logs, hook: hook,
		client: &wechatfake.Client{URL: hook.URL + Route, Token: testToken, AppID: testAppID, EncodingAESKey: aesKey},
	}
	if start {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		require.NoError(t, ch.Start(ctx, h.rec))
	}
	t.Cleanup(func() {
		// No secret reaches the log, whatever the test did.
		assert.NotContains(t, logs.String(), testSecret)
		assert.NotContains(t, logs.String(), "TOKEN-")
	})
	return h
}

// TestSDKLoggingStaysQuiet guards against importing the SDK's root package, whose init turns logrus
// to debug level, process-wide, which prints every inbound message.
func TestSDKLoggingStaysQuiet(t *testing.T) {
	assert.NotEqual(t, logrus.DebugLevel, logrus.GetLevel())
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing all", Config{}, "missing config app_id, app_secret, token"},
		{"missing token", Config{AppID: "a", AppSecret: "b"}, "missing config token"},
		{"short aes key", Config{AppID: "a", AppSecret: "b", Token: "c", EncodingAESKey: "short"}, "43 characters"},
		{"bad aes key", Config{AppID: "a", AppSecret: "b", Token: "c", EncodingAESKey: strings.Repeat("!", 43)}, "encoding_aes_key"},
		{"bad base url", Config{AppID: "a", AppSecret: "b", Token: "c", APIBaseURL: "ftp://x"}, "api base url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	ch, err := New(Config{AppID: "a", AppSecret: "b", Token: "c", EncodingAESKey: wechatfake.NewAESKey()})
	require.NoError(t, err)
	assert.Equal(t, "wechat", ch.Name())
	assert.Zero(t, ch.Limits().UpdatesPerSecond)
	assert.Equal(t, DefaultAPIBaseURL, ch.api.base)
}

func TestStartRejectsBadCredentials(t *testing.T) {
	api := wechatfake.NewServer(testAppID, "the-real-secret")
	defer api.Close()
	logs := &testkit.SyncBuffer{}
	ch, err := New(Config{AppID: testAppID, AppSecret: testSecret, Token: testToken, APIBaseURL: api.URL,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	err = ch.Start(context.Background(), &recorder{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "app_id or app_secret rejected")
	assert.Contains(t, err.Error(), "40125")
	assert.Contains(t, logs.String(), "errcode=40125")
	assert.NotContains(t, logs.String()+err.Error(), testSecret)

	// The webhook stays closed.
	hook := httptest.NewServer(ch.Routes()[Route])
	defer hook.Close()
	c := &wechatfake.Client{URL: hook.URL, Token: testToken, AppID: testAppID}
	resp, err := c.Verify(context.Background(), "abc", false)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.Status)
}

func TestStartUnreachableAPIKeepsSecretsOutOfErrors(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	base := dead.URL
	dead.Close()
	ch, err := New(Config{AppID: testAppID, AppSecret: testSecret, Token: testToken, APIBaseURL: base,
		Logger: slog.New(slog.NewTextHandler(&testkit.SyncBuffer{}, nil))})
	require.NoError(t, err)
	err = ch.Start(context.Background(), &recorder{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wechat")
	assert.NotContains(t, err.Error(), testSecret)
	assert.NotContains(t, err.Error(), "secret=")
}

func TestVerifyEchostr(t *testing.T) {
	h := newHarness(t, "", true)
	ctx := context.Background()
	resp, err := h.client.Verify(ctx, "echo-1234567890", false)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.Status)
	assert.Equal(t, "echo-1234567890", resp.Body)

	resp, err = h.client.Verify(ctx, "echo-1234567890", true)
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, resp.Status)
	assert.NotContains(t, resp.Body, "echo-1234567890")

	// An unsigned GET is refused; a signed GET without echostr is not a verification.
	r, err := http.Get(h.client.URL)
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusForbidden, r.StatusCode)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	r, err = http.Get(h.client.URL + "?timestamp=" + now + "&nonce=2&signature=" + wechatfake.Sign(testToken, now, "2"))
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusBadRequest, r.StatusCode)
	// A verification signed long ago is refused like any forgery.
	r, err = http.Get(h.client.URL + "?timestamp=1&nonce=2&echostr=e&signature=" + wechatfake.Sign(testToken, "1", "2"))
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusForbidden, r.StatusCode)
}

func TestWebhookDeliversText(t *testing.T) {
	for _, safe := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "aes"}[safe]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, keyFor(safe), true)
			resps, err := h.client.SendText(context.Background(), testOpenID, "  什么是 bbolt？ ", 7001, wechatfake.Delivery{Safe: safe})
			require.NoError(t, err)
			require.Len(t, resps, 1)
			require.NoError(t, resps[0].Err)
			assert.Equal(t, http.StatusOK, resps[0].Status)
			assert.Equal(t, "success", resps[0].Body)

			got := h.rec.got()
			require.Len(t, got, 1)
			assert.Equal(t, channels.Message{
				Channel: "wechat", ID: "7001", ConversationID: testOpenID, SenderID: testOpenID,
				SenderName: "微信用户 enid-1", Text: "什么是 bbolt？", Ref: testOpenID,
			}, got[0])
		})
	}
}

// keyFor returns an EncodingAESKey for safe-mode tests and none for plain-mode ones: with a key
// set, the channel accepts only encrypted pushes.
func keyFor(safe bool) string {
	if safe {
		return wechatfake.NewAESKey()
	}
	return ""
}

func TestWebhookRejectsBadSignatures(t *testing.T) {
	key := wechatfake.NewAESKey()
	tests := []struct {
		name   string
		client func(h *harness) *wechatfake.Client
		d      wechatfake.Delivery
		status int
	}{
		{"plain bad signature", nil, wechatfake.Delivery{BadSignature: true}, http.StatusForbidden},
		{"aes bad signatures", nil, wechatfake.Delivery{Safe: true, BadSignature: true}, http.StatusForbidden},
		{"aes wrong key", func(h *harness) *wechatfake.Client {
			c := *h.client
			c.EncodingAESKey = wechatfake.NewAESKey()
			return &c
		}, wechatfake.Delivery{Safe: true}, http.StatusBadRequest},
		{"aes wrong appid", func(h *harness) *wechatfake.Client {
			c := *h.client
			c.AppID = "wxsomeoneelse"
			return &c
		}, wechatfake.Delivery{Safe: true}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, key, true)
			c := h.client
			if tt.client != nil {
				c = tt.client(h)
			}
			before := len(h.api.Requests())
			resps, err := c.SendText(context.Background(), testOpenID, "hello", 9, tt.d)
			require.NoError(t, err)
			require.NotEmpty(t, resps)
			assert.Equal(t, tt.status, resps[0].Status)
			assert.NotEqual(t, "success", resps[0].Body)
			assert.Empty(t, h.rec.got(), "a rejected push must start nothing")
			assert.Len(t, h.api.Requests(), before, "a rejected push must not call the API")
		})
	}
}

func TestWebhookSafeModeNotConfigured(t *testing.T) {
	h := newHarness(t, "", true)
	c := *h.client
	c.EncodingAESKey = wechatfake.NewAESKey()
	resps, err := c.SendText(context.Background(), testOpenID, "hello", 10, wechatfake.Delivery{Safe: true})
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, resps[0].Status)
	assert.Empty(t, h.rec.got())
	assert.Contains(t, h.logs.String(), "encoding_aes_key is not configured")
}

func TestWebhookNonTextAndEvents(t *testing.T) {
	for _, safe := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "aes"}[safe]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, keyFor(safe), true)
			ctx := context.Background()
			resps, err := h.client.Deliver(ctx, testOpenID, h.client.ImageXML(testOpenID, 55, time.Now()), wechatfake.Delivery{Safe: safe})
			require.NoError(t, err)
			require.NoError(t, resps[0].Err)
			assert.Equal(t, http.StatusOK, resps[0].Status)
			// The notice is a passive reply (no API quota used), encrypted in safe mode.
			assert.Contains(t, resps[0].Plain, "<Content><![CDATA["+UnsupportedNotice+"]]></Content>")
			assert.Contains(t, resps[0].Plain, "<ToUserName><![CDATA["+testOpenID+"]]></ToUserName>")
			if safe {
				assert.Contains(t, resps[0].Body, "<Encrypt>")
				assert.NotContains(t, resps[0].Body, UnsupportedNotice)
			}

			resps, err = h.client.Deliver(ctx, testOpenID, h.client.EventXML(testOpenID, "subscribe", time.Now()), wechatfake.Delivery{Safe: safe})
			require.NoError(t, err)
			assert.Equal(t, "success", resps[0].Body)
			assert.Empty(t, h.rec.got())
		})
	}
}

func TestWebhookVoice(t *testing.T) {
	h := newHarness(t, "", true)
	ctx := context.Background()
	resps, err := h.client.Deliver(ctx, testOpenID, h.client.VoiceXML(testOpenID, "", 81, time.Now()), wechatfake.Delivery{})
	require.NoError(t, err)
	assert.Contains(t, resps[0].Body, UnsupportedNotice)
	assert.Empty(t, h.rec.got())

	resps, err = h.client.Deliver(ctx, testOpenID, h.client.VoiceXML(testOpenID, "明天天气怎么样", 82, time.Now()), wechatfake.Delivery{})
	require.NoError(t, err)
	assert.Equal(t, "success", resps[0].Body)
	got := h.rec.got()
	require.Len(t, got, 1)
	assert.Equal(t, "明天天气怎么样", got[0].Text)
	assert.Equal(t, "82", got[0].ID)
}

func TestWebhookBeforeStartAndMethods(t *testing.T) {
	h := newHarness(t, "", false)
	resps, err := h.client.SendText(context.Background(), testOpenID, "hi", 1, wechatfake.Delivery{})
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resps[0].Status)

	require.NoError(t, h.ch.Start(context.Background(), h.rec))
	req, err := http.NewRequest(http.MethodPut, h.client.URL, nil)
	require.NoError(t, err)
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, r.StatusCode)
}

func TestWebhookAcksSlowHandler(t *testing.T) {
	h := newHarness(t, "", false)
	h.ch.handoffWait = 50 * time.Millisecond
	release := make(chan struct{})
	slow := channels.Handler(handlerFunc(func(ctx context.Context, m channels.Message) { <-release }))
	require.NoError(t, h.ch.Start(context.Background(), slow))
	defer close(release)
	// The handler blocks until the test ends, so a "success" at all is the acknowledgement the
	// channel gave without it; the delivery timeout only catches a hang.
	resps, err := h.client.SendText(context.Background(), testOpenID, "hi", 2, wechatfake.Delivery{Timeout: 20 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, "success", resps[0].Body)
	assert.Contains(t, h.logs.String(), "acknowledging WeChat anyway")
}

type handlerFunc func(ctx context.Context, m channels.Message)

func (f handlerFunc) HandleMessage(ctx context.Context, m channels.Message) { f(ctx, m) }

func msgFor(openID string) channels.Message {
	return channels.Message{Channel: Name, ID: "1", ConversationID: openID, SenderID: openID, Ref: openID}
}

// assertMarkerFree checks every body the fake received.
func assertMarkerFree(t *testing.T, api *wechatfake.Server) {
	t.Helper()
	for _, r := range api.Requests() {
		assert.Empty(t, citations.Markers(string(r.Body)), "marker in %s body %s", r.Path, r.Body)
		assert.NotContains(t, string(r.Body), "[^", "partial marker in %s body", r.Path)
	}
}

func TestReplyTypingThenSplitAnswer(t *testing.T) {
	h := newHarness(t, "", true)
	h.ch.typingEvery = 20 * time.Millisecond
	ctx := context.Background()
	r, err := h.ch.Reply(ctx, msgFor(testOpenID))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	// The keep-alive repeats the indicator; the bound only stops a hang on a busy machine.
	require.Eventually(t, func() bool { return len(h.api.Typing()) >= 3 }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, r.Update(ctx, "ignored"))

	var long strings.Builder
	for i := range 200 {
		long.WriteString("这是第")
		long.WriteString(strings.Repeat("长", i%7))
		long.WriteString("句话，引用了来源。\n")
	}
	require.NoError(t, r.Finish(ctx, long.String()))

	typing := h.api.Typing()
	require.GreaterOrEqual(t, len(typing), 2, "typing is kept alive while the run lasts")
	for _, c := range typing {
		assert.Equal(t, TypingCommand(testOpenID, "Typing"), c)
	}
	msgs := h.api.Messages()
	want := splitText(citations.Strip(long.String()), maxPartBytes, maxParts)
	require.Len(t, msgs, len(want))
	require.Greater(t, len(msgs), 1)
	for i, m := range msgs {
		assert.Equal(t, testOpenID, m.ToUser)
		assert.Equal(t, want[i], m.Content)
		assert.LessOrEqual(t, len(m.Content), maxPartBytes)
	}
	// No typing request after the first message: the keep-alive stopped before sending.
	reqs := h.api.Requests()
	firstSend := -1
	for i, rq := range reqs {
		if rq.Path == wechatfake.PathSend && firstSend < 0 {
			firstSend = i
		}
		if firstSend >= 0 {
			assert.NotEqual(t, wechatfake.PathTyping, rq.Path, "typing after the answer")
		}
	}
	assertMarkerFree(t, h.api)
}

// TypingCommand builds the fake's record of a typing request.
func TypingCommand(openID, cmd string) wechatfake.TypingCommand {
	return wechatfake.TypingCommand{ToUser: openID, Command: cmd}
}

func TestReplyFail(t *testing.T) {
	h := newHarness(t, "", true)
	ctx := context.Background()
	r, err := h.ch.Reply(ctx, msgFor(testOpenID))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Fail(ctx, "抱歉，这次回答失败了：model timeout"))
	r2, err := h.ch.Reply(ctx, msgFor(testOpenID))
	require.NoError(t, err)
	require.NoError(t, r2.Fail(ctx, ""))
	msgs := h.api.Messages()
	require.Len(t, msgs, 2)
	assert.Equal(t, "抱歉，这次回答失败了：model timeout", msgs[0].Content)
	assert.Equal(t, failNotice, msgs[1].Content)
	assertMarkerFree(t, h.api)
}

// TestSendDeliversTheTextAsGiven: the adapter sends the text the gateway made safe as it is (the
// markers are the gateway's job, proven end to end in TestE2ENoMarkerForAnyChunking); a blank text
// still says something.
func TestSendDeliversTheTextAsGiven(t *testing.T) {
	h := newHarness(t, "", true)
	ctx := context.Background()
	for _, text := range []string{"AB", "x", " \n"} {
		require.NoError(t, h.ch.Send(ctx, msgFor(testOpenID), text))
	}
	msgs := h.api.Messages()
	require.Len(t, msgs, 3)
	assert.Equal(t, "AB", msgs[0].Content)
	assert.Equal(t, "x", msgs[1].Content)
	assert.Equal(t, "（没有可显示的回答）", msgs[2].Content)
}

func TestTokenRefreshOn40001(t *testing.T) {
	h := newHarness(t, "", true)
	ctx := context.Background()
	require.Equal(t, 1, h.api.TokenFetches(), "Start fetched the token")
	require.NoError(t, h.ch.Send(ctx, msgFor(testOpenID), "one"))
	assert.Equal(t, 1, h.api.TokenFetches(), "the token is cached")

	h.api.ExpireTokens()
	require.NoError(t, h.ch.Send(ctx, msgFor(testOpenID), "two"))
	assert.Equal(t, 2, h.api.TokenFetches())
	assert.Equal(t, []wechatfake.TextMessage{{ToUser: testOpenID, Content: "one"}, {ToUser: testOpenID, Content: "two"}}, h.api.Messages())
	assert.Contains(t, h.logs.String(), "errcode=40001")

	// Refresh once only: a token rejected twice is an error, not a loop.
	h.api.InjectError(wechatfake.PathSend, 42001, "access_token expired", 2)
	err := h.ch.Send(ctx, msgFor(testOpenID), "three")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 42001, ae.Code)
	assert.Equal(t, 3, h.api.TokenFetches())
}

func TestWindowExpiredIsLoggedAndChannelKeepsServing(t *testing.T) {
	for _, code := range []int{CodeWindowExpired, CodeResponseLimit} {
		t.Run("errcode "+itoa(code), func(t *testing.T) {
			h := newHarness(t, "", true)
			ctx := context.Background()
			h.api.InjectError(wechatfake.PathSend, code, "response out of time limit or subscription is canceled", 1)
			r, err := h.ch.Reply(ctx, msgFor(testOpenID))
			require.NoError(t, err)
			err = r.Finish(ctx, "answer")
			var ae *APIError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, code, ae.Code)
			assert.True(t, ae.WindowClosed())
			assert.Contains(t, h.logs.String(), "48-hour window")
			assert.Contains(t, h.logs.String(), "errcode="+itoa(code))

			// The next message is served.
			_, err = h.client.SendText(ctx, testOpenID, "again", 77, wechatfake.Delivery{})
			require.NoError(t, err)
			require.Len(t, h.rec.got(), 1)
			require.NoError(t, h.ch.Send(ctx, msgFor(testOpenID), "answer 2"))
			assert.Equal(t, []wechatfake.TextMessage{{ToUser: testOpenID, Content: "answer 2"}}, h.api.Messages())
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestSystemBusyIsRetried(t *testing.T) {
	h := newHarness(t, "", true)
	h.api.InjectError(wechatfake.PathSend, CodeSystemBusy, "system error", 2)
	require.NoError(t, h.ch.Send(context.Background(), msgFor(testOpenID), "hi"))
	assert.Len(t, h.api.Messages(), 1)

	h.api.InjectError(wechatfake.PathSend, CodeSystemBusy, "system error", maxBusyRetries+1)
	err := h.ch.Send(context.Background(), msgFor(testOpenID), "hi")
	var ae *APIError
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, CodeSystemBusy, ae.Code)
}

func TestTypingFailureDoesNotBlockAnswer(t *testing.T) {
	h := newHarness(t, "", true)
	h.api.InjectError(wechatfake.PathTyping, 45047, "out of response count limit", 1)
	ctx := context.Background()
	r, err := h.ch.Reply(ctx, msgFor(testOpenID))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Finish(ctx, "answer"))
	assert.Len(t, h.api.Messages(), 1)
	assert.Contains(t, h.logs.String(), "typing indicator failed")
}

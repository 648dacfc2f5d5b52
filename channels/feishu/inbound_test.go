package feishu_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/feishu"
	"github.com/citegate/citegate/internal/fakes/feishu"
	"github.com/citegate/citegate/internal/testkit"
)

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  feishu.Config
		want string
	}{
		{"no credentials", feishu.Config{}, "app_id and app_secret"},
		{"bad mode", feishu.Config{AppID: "a", AppSecret: "b", Mode: "poll"}, "unknown mode"},
		{"webhook without token", feishu.Config{AppID: "a", AppSecret: "b", Mode: "webhook"}, "verification_token"},
		{"bad base url", feishu.Config{AppID: "a", AppSecret: "b", BaseURL: "open.feishu.cn"}, "base_url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := feishu.New(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	ch, err := feishu.New(feishu.Config{AppID: "a", AppSecret: "b"})
	require.NoError(t, err)
	assert.Equal(t, "feishu", ch.Name())
	assert.Equal(t, 5.0, ch.Limits().UpdatesPerSecond)
	assert.Empty(t, ch.Routes(), "long-connection mode serves no routes")
}

func TestLongConnDeliversMessage(t *testing.T) {
	fake := newFake(t)
	rec := newRecorder()
	h := startLongConn(t, fake, rec, nil)
	assert.Equal(t, fake.Options().BotOpenID, h.ch.BotOpenID())

	ev := feishufake.MessageEvent{MessageID: "om_1", ChatID: "oc_1", Text: "  什么是 CardKit？ "}
	for _, parts := range []int{1, 3} { // one frame, and a payload split over three frames
		t.Run("parts="+string(rune('0'+parts)), func(t *testing.T) {
			ack, err := fake.Push(ctxT(t), ev.JSON(), parts)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, ack.Code)
			assert.NotEmpty(t, ack.BizRT)
		})
	}
	msgs := rec.messages()
	require.Len(t, msgs, 2)
	assert.Equal(t, channels.Message{
		Channel: "feishu", ID: "om_1", ConversationID: "oc_1", SenderID: "ou_user",
		Text: "什么是 CardKit？", Ref: feishu.Ref{MessageID: "om_1", ChatID: "oc_1"},
	}, msgs[0])
	assert.Equal(t, msgs[0], msgs[1], "the channel passes redeliveries on; the dispatcher dedups")
	assert.NotContains(t, h.logs.String(), fake.Options().AppSecret)
	assert.NotContains(t, h.logs.String(), "fake-access-key", "long-connection credentials are redacted")
}

func TestLongConnIgnoredEventTypesAreAcked(t *testing.T) {
	fake := newFake(t)
	rec := newRecorder()
	startLongConn(t, fake, rec, nil)
	ev, _ := json.Marshal(map[string]any{
		"schema": "2.0",
		"header": map[string]string{"event_id": "e1", "event_type": "im.message.message_read_v1"},
		"event":  map[string]any{"message_id_list": []string{"om_1"}},
	})
	ack, err := fake.Push(ctxT(t), ev, 1)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, ack.Code, "a subscribed event without a handler would be re-pushed")
	assert.Empty(t, rec.messages())
}

func TestStartFailures(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*feishu.Config)
		inject func(*feishufake.Server)
		want   string
	}{
		{"bad secret", func(c *feishu.Config) { c.AppSecret = "wrong" }, nil, "code 10014"},
		{"bot info refused", nil, func(f *feishufake.Server) { f.InjectError(feishufake.OpBotInfo, 99991672, 1) }, "bot info"},
		{"endpoint refused", nil, func(f *feishufake.Server) { f.InjectError(feishufake.OpEndpoint, 1000040351, 1) }, "code 1000040351"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFake(t)
			if tc.inject != nil {
				tc.inject(fake)
			}
			ch, logs := newChannel(t, fake, tc.mutate)
			errc := make(chan error, 1)
			go func() { errc <- ch.Start(ctxT(t), newRecorder()) }()
			select {
			case err := <-errc:
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
			case <-time.After(10 * time.Second):
				t.Fatal("Start did not report the failure")
			}
			assert.NotContains(t, logs.String(), fake.Options().AppSecret)
			assert.Zero(t, fake.Connections())
		})
	}
}

func TestStartReturnsWhenContextEnds(t *testing.T) {
	fake := newFake(t)
	rec := newRecorder()
	h := startLongConn(t, fake, rec, nil)
	require.NoError(t, h.stop())
	// Stopping closes the socket, so Feishu hands later events to a live connection of the app.
	waitFor(t, "the long connection to close", func() bool { return fake.Connections() == 0 })
	_, err := fake.Push(ctxT(t), feishufake.MessageEvent{MessageID: "om_late", ChatID: "oc_1", Text: "hi"}.JSON(), 1)
	require.Error(t, err)
	assert.Empty(t, rec.messages())
	assert.Equal(t, 1, fake.Connected(), "a stopped channel does not reconnect")
}

func TestGroupMentions(t *testing.T) {
	fake := newFake(t)
	rec := newRecorder()
	startLongConn(t, fake, rec, nil)
	bot := fake.BotMention("@_user_1")
	alice := feishufake.Mention{Key: "@_user_2", OpenID: "ou_alice", Name: "Alice"}
	post := `{"title":"","content":[[{"tag":"at","user_id":"@_user_1","user_name":"citegate"},{"tag":"text","text":" 总结一下 "},{"tag":"a","text":"这篇","href":"https://example.com"}],[{"tag":"text","text":"谢谢"}]]}`
	tests := []struct {
		name          string
		ev            feishufake.MessageEvent
		wantMentioned bool
		wantGroup     bool
		wantText      string
	}{
		{"p2p", feishufake.MessageEvent{ChatType: "p2p", Text: "hello"}, false, false, "hello"},
		{"group without mention", feishufake.MessageEvent{ChatType: "group", Text: "hello all"}, false, true, "hello all"},
		{"group mentioning someone else", feishufake.MessageEvent{ChatType: "group", Text: "@_user_2 look", Mentions: []feishufake.Mention{alice}}, false, true, "@Alice look"},
		{"group with bot mention", feishufake.MessageEvent{ChatType: "group", Text: "@_user_1  what is bbolt?", Mentions: []feishufake.Mention{bot}}, true, true, "what is bbolt?"},
		{"mention in the middle", feishufake.MessageEvent{ChatType: "group", Text: "ask @_user_1 and @_user_2 about it", Mentions: []feishufake.Mention{bot, alice}}, true, true, "ask and @Alice about it"},
		{"post with mention", feishufake.MessageEvent{ChatType: "group", MessageType: "post", Content: post, Mentions: []feishufake.Mention{bot}}, true, true, "总结一下 这篇\n谢谢"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.ev.MessageID = "om_g" + string(rune('a'+i))
			tc.ev.ChatID = "oc_group"
			ack, err := fake.Push(ctxT(t), tc.ev.JSON(), 1)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, ack.Code)
			msgs := rec.messages()
			require.NotEmpty(t, msgs)
			got := msgs[len(msgs)-1]
			assert.Equal(t, tc.ev.MessageID, got.ID)
			assert.Equal(t, tc.wantGroup, got.Group)
			assert.Equal(t, tc.wantMentioned, got.Mentioned)
			assert.Equal(t, tc.wantText, got.Text)
		})
	}
}

func TestUnsupportedMessageTypesIgnored(t *testing.T) {
	fake := newFake(t)
	rec := newRecorder()
	startLongConn(t, fake, rec, nil)
	for _, ev := range []feishufake.MessageEvent{
		{MessageID: "om_img", ChatID: "oc_1", MessageType: "image", Content: `{"image_key":"img_1"}`},
		{MessageID: "om_bad", ChatID: "oc_1", Content: `not json`},
	} {
		ack, err := fake.Push(ctxT(t), ev.JSON(), 1)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, ack.Code, "nothing to answer is still acked, or Feishu re-pushes it")
	}
	assert.Empty(t, rec.messages())
}

// webhookServer starts a webhook-mode channel behind an httptest server.
func webhookServer(t *testing.T, fake *feishufake.Server, encryptKey string) (*recorder, string, *testkit.SyncBuffer) {
	t.Helper()
	ch, logs := newChannel(t, fake, func(c *feishu.Config) {
		c.Mode = feishu.ModeWebhook
		c.VerificationToken = "vtoken"
		c.EncryptKey = encryptKey
	})
	routes := ch.Routes()
	require.Contains(t, routes, feishu.WebhookPath)
	mux := http.NewServeMux()
	for p, h := range routes {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	url := srv.URL + feishu.WebhookPath

	// Before Start the route answers 503 and hands nothing on.
	status, _, err := feishufake.PostWebhook(ctxT(t), url, feishufake.MessageEvent{MessageID: "om_early", ChatID: "oc", Text: "x", Token: "vtoken"}.JSON(), feishufake.WebhookOptions{EncryptKey: encryptKey})
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, status)

	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, ch.Start(ctx, rec), "webhook mode returns once ready")
	return rec, url, logs
}

func TestWebhookPlain(t *testing.T) {
	fake := newFake(t)
	rec, url, logs := webhookServer(t, fake, "")
	ctx := ctxT(t)

	status, body, err := feishufake.PostWebhook(ctx, url, feishufake.ChallengeJSON("vtoken", "c-123"), feishufake.WebhookOptions{})
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"challenge":"c-123"}`, string(body))

	status, body, err = feishufake.PostWebhook(ctx, url, feishufake.ChallengeJSON("wrong", "c-123"), feishufake.WebhookOptions{})
	require.NoError(t, err)
	assert.Equal(t, feishu.RejectStatus, status)
	assert.Equal(t, feishu.RejectBody, string(body))

	tests := []struct {
		name       string
		token      string
		wantStatus int
		wantMsgs   int
	}{
		{"token mismatch", "forged", feishu.RejectStatus, 0},
		{"no token", "", feishu.RejectStatus, 0},
		{"right token", "vtoken", http.StatusOK, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.messages())
			ev := feishufake.MessageEvent{MessageID: "om_wh_" + tc.name, ChatID: "oc_1", Text: "hi", Token: tc.token}
			status, _, err := feishufake.PostWebhook(ctx, url, ev.JSON(), feishufake.WebhookOptions{})
			require.NoError(t, err)
			assert.Equal(t, tc.wantStatus, status)
			assert.Len(t, rec.messages(), before+tc.wantMsgs)
		})
	}
	assert.Contains(t, logs.String(), "verification token mismatch")
	assert.NotContains(t, logs.String(), "vtoken")

	// A GET and a body that is not JSON are refused like a forgery: same status, same body.
	resp, err := http.Get(url)
	require.NoError(t, err)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, feishu.RejectStatus, resp.StatusCode)
	assert.Equal(t, feishu.RejectBody, string(got))

	status, body, err = feishufake.PostWebhook(ctx, url, []byte(strings.Repeat("x", 10)), feishufake.WebhookOptions{})
	require.NoError(t, err)
	assert.Equal(t, feishu.RejectStatus, status)
	assert.Equal(t, feishu.RejectBody, string(body))
}

func TestWebhookEncrypted(t *testing.T) {
	fake := newFake(t)
	rec, url, _ := webhookServer(t, fake, "ekey-123")
	ctx := ctxT(t)

	status, body, err := feishufake.PostWebhook(ctx, url, feishufake.ChallengeJSON("vtoken", "c-9"), feishufake.WebhookOptions{EncryptKey: "ekey-123"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"challenge":"c-9"}`, string(body))

	tests := []struct {
		name     string
		token    string
		opt      feishufake.WebhookOptions
		wantOK   bool
		wantMsgs int
	}{
		{"bad signature", "vtoken", feishufake.WebhookOptions{EncryptKey: "ekey-123", BadSignature: true}, false, 0},
		{"wrong key", "vtoken", feishufake.WebhookOptions{EncryptKey: "other-key"}, false, 0},
		{"plain body", "vtoken", feishufake.WebhookOptions{}, false, 0},
		{"signed but token mismatch", "forged", feishufake.WebhookOptions{EncryptKey: "ekey-123"}, false, 0},
		{"signed and encrypted", "vtoken", feishufake.WebhookOptions{EncryptKey: "ekey-123"}, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.messages())
			ev := feishufake.MessageEvent{MessageID: "om_enc_" + tc.name, ChatID: "oc_1", Text: "加密消息", Token: tc.token}
			status, _, err := feishufake.PostWebhook(ctx, url, ev.JSON(), tc.opt)
			require.NoError(t, err)
			assert.Equal(t, tc.wantOK, status == http.StatusOK, "status %d", status)
			msgs := rec.messages()
			require.Len(t, msgs, before+tc.wantMsgs)
			if tc.wantMsgs > 0 {
				assert.Equal(t, "加密消息", msgs[len(msgs)-1].Text)
			}
		})
	}
}

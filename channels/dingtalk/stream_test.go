package dingtalk_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/open-dingtalk/dingtalk-stream-sdk-go/chatbot"
	"github.com/open-dingtalk/dingtalk-stream-sdk-go/payload"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/dingtalk"
	dingtalkfake "github.com/citegate/citegate/internal/fakes/dingtalk"
)

// inbound pushes bm and returns what the handler received.
func (e *env) inbound(t *testing.T, rec *recorder, bm chatbot.BotCallbackDataModel) (channels.Message, chatbot.BotCallbackDataModel) {
	t.Helper()
	sent, _, err := e.fake.PushBotMessage(bm)
	require.NoError(t, err)
	return rec.next(t), sent
}

func TestNewValidatesConfig(t *testing.T) {
	_, err := dingtalk.New(dingtalk.Config{ClientID: "x"})
	require.ErrorContains(t, err, "client_secret")
	ch, err := dingtalk.New(dingtalk.Config{ClientID: "x", ClientSecret: "y"})
	require.NoError(t, err)
	assert.Equal(t, "dingtalk", ch.Name())
	assert.Zero(t, ch.Limits().UpdatesPerSecond, "markdown mode does not stream")
	ch, err = dingtalk.New(dingtalk.Config{ClientID: "x", ClientSecret: "y", CardTemplateID: "tpl"})
	require.NoError(t, err)
	assert.Equal(t, 4.0, ch.Limits().UpdatesPerSecond)
}

func TestStartBadCredentialsReturnsError(t *testing.T) {
	e := newEnv(t, func(c *dingtalk.Config) { c.ClientSecret = "wrong-secret" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.ch.Start(ctx, newRecorder())
	require.Error(t, err)
	var oe *dingtalk.OpenError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, http.StatusUnauthorized, oe.Status)
	assert.Equal(t, "InvalidAuthentication", oe.Code)
	assert.NotContains(t, err.Error(), "wrong-secret", "secrets never appear in errors")
	assert.NotContains(t, e.logs.String(), "wrong-secret", "secrets never appear in logs")
	assert.Zero(t, e.fake.Connections())
}

func TestStartRetriesServerErrorsThenConnects(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.FailNext(http.MethodPost, dingtalkfake.PathOpen, 3, http.StatusServiceUnavailable, "ServiceUnavailable")
	e.start(t, newRecorder())
	assert.Len(t, e.fake.Requests(dingtalkfake.PathOpen), 4)
	assert.Contains(t, e.logs.String(), "ServiceUnavailable")
}

func TestStartEndsWithContext(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.ch.Start(ctx, newRecorder()) }()
	e.await(t, func() bool { return e.fake.LiveConnections() == 1 })
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after cancel")
	}
	e.await(t, func() bool { return e.fake.LiveConnections() == 0 })
}

func TestInboundMessagesAndAcks(t *testing.T) {
	tests := []struct {
		name    string
		msg     chatbot.BotCallbackDataModel
		botName string
		want    channels.Message
	}{
		{
			name: "one-to-one text, trimmed",
			msg:  dingtalkfake.BotMessage("cid-1", "staff-1", "  什么是 RAG？ \n", false),
			want: channels.Message{Channel: "dingtalk", ConversationID: "cid-1", SenderID: "staff-1", Group: false, Mentioned: true, Text: "什么是 RAG？"},
		},
		{
			name:    "group with leading mention removed",
			msg:     dingtalkfake.BotMessage("cid-g", "staff-2", "@citegate 今天的新闻", true),
			botName: "citegate",
			want:    channels.Message{Channel: "dingtalk", ConversationID: "cid-g", SenderID: "staff-2", Group: true, Mentioned: true, Text: "今天的新闻"},
		},
		{
			name: "group not in at list",
			msg: func() chatbot.BotCallbackDataModel {
				m := dingtalkfake.BotMessage("cid-g", "staff-3", "hello", true)
				m.IsInAtList = false
				return m
			}(),
			want: channels.Message{Channel: "dingtalk", ConversationID: "cid-g", SenderID: "staff-3", Group: true, Mentioned: false, Text: "hello"},
		},
		{
			name: "external sender without staff id",
			msg: func() chatbot.BotCallbackDataModel {
				m := dingtalkfake.BotMessage("cid-x", "", "hi", false)
				m.SenderId = "$:LWCP_v1:$ext"
				return m
			}(),
			want: channels.Message{Channel: "dingtalk", ConversationID: "cid-x", SenderID: "$:LWCP_v1:$ext", Mentioned: true, Text: "hi"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *dingtalk.Config) { c.BotName = tt.botName })
			rec := newRecorder()
			e.start(t, rec)
			sent, frameID, err := e.fake.PushBotMessage(tt.msg)
			require.NoError(t, err)
			got := rec.next(t)
			ref, ok := got.Ref.(*dingtalk.Ref)
			require.True(t, ok)
			assert.Equal(t, sent.SessionWebhook, ref.SessionWebhook)
			assert.Equal(t, sent.SessionWebhookExpiredTime, ref.WebhookExpiresAt.UnixMilli())
			assert.Equal(t, tt.msg.SenderStaffId, ref.StaffID)
			assert.Equal(t, sent.MsgId, got.ID, "dedup key is the payload msgId, not the frame id")
			assert.NotEqual(t, frameID, got.ID)
			got.Ref, got.SenderName = nil, ""
			tt.want.ID = sent.MsgId
			assert.Equal(t, tt.want, got)

			e.await(t, func() bool { _, ok := e.fake.AckFor(frameID); return ok })
			ack, _ := e.fake.AckFor(frameID)
			assert.Equal(t, 200, ack.Response.Code)
			assert.Equal(t, "OK", ack.Response.Message)
			assert.Equal(t, `{"response":null}`, ack.Response.Data)
			assert.Equal(t, payload.DataFrameContentTypeKJson, ack.Response.Headers[payload.DataFrameHeaderKContentType])

			subs := e.fake.Subscriptions()
			require.NotEmpty(t, subs)
			assert.Contains(t, subs[0], payload.SubscriptionModel{Type: "CALLBACK", Topic: payload.BotMessageCallbackTopic})
			assert.Contains(t, subs[0], payload.SubscriptionModel{Type: "SYSTEM", Topic: "ping"})
		})
	}
}

func TestSystemPingEchoesData(t *testing.T) {
	e := newEnv(t, nil)
	e.start(t, newRecorder())
	id, data, err := e.fake.SendPing()
	require.NoError(t, err)
	e.await(t, func() bool { _, ok := e.fake.AckFor(id); return ok })
	ack, _ := e.fake.AckFor(id)
	assert.Equal(t, 200, ack.Response.Code)
	assert.JSONEq(t, data, ack.Response.Data)
}

func TestUnknownCallbackTopicGets404(t *testing.T) {
	e := newEnv(t, nil)
	e.start(t, newRecorder())
	// An EVENT frame we never subscribed to: the SDK answers 404 (no handler), and so do we.
	id, err := e.fake.SendFrame("EVENT", "chat_update_title", `{}`)
	require.NoError(t, err)
	e.await(t, func() bool { _, ok := e.fake.AckFor(id); return ok })
	ack, _ := e.fake.AckFor(id)
	assert.Equal(t, 404, ack.Response.Code)
	// Garbage is ignored and the connection stays up.
	_, err = e.fake.SendFrame("CALLBACK", payload.BotMessageCallbackTopic, `not json`)
	require.NoError(t, err)
	id, _, err = e.fake.SendPing()
	require.NoError(t, err)
	e.await(t, func() bool { _, ok := e.fake.AckFor(id); return ok })
	assert.Equal(t, 1, e.fake.Connections())
}

func TestDisconnectFrameReconnectsWithFreshTicket(t *testing.T) {
	e := newEnv(t, nil)
	rec := newRecorder()
	e.start(t, rec)
	require.NoError(t, e.fake.SendDisconnect())
	require.NoError(t, e.fake.WaitConnected(ctxT(t), 2))
	assert.Len(t, e.fake.Requests(dingtalkfake.PathOpen), 2, "a fresh ticket per connection")
	m, _ := e.inbound(t, rec, dingtalkfake.BotMessage("cid", "staff", "after reconnect", false))
	assert.Equal(t, "after reconnect", m.Text)
}

func TestSurvivesServerThatStopsAnsweringPings(t *testing.T) {
	e := newEnv(t, func(c *dingtalk.Config) { c.KeepAlive = 200 * time.Millisecond })
	rec := newRecorder()
	e.start(t, rec)
	for round := 2; round <= 3; round++ {
		start := time.Now()
		e.fake.KillConnections() // no pongs, no reads, TCP stays open
		require.NoError(t, e.fake.WaitConnected(ctxT(t), round))
		elapsed := time.Since(start)
		// Without the keepalive the dead connection would never be noticed (TCP stays open), so
		// reconnecting at all is the proof; the bound only catches a hang.
		assert.Less(t, elapsed, 20*time.Second, "a dead connection is noticed by the keepalive")
		m, _ := e.inbound(t, rec, dingtalkfake.BotMessage("cid", "staff", "still here", false))
		assert.Equal(t, "still here", m.Text)
	}
	assert.Contains(t, e.logs.String(), "no pong")
}

func TestReconnectsAfterTCPDrop(t *testing.T) {
	e := newEnv(t, nil)
	rec := newRecorder()
	e.start(t, rec)
	e.fake.DropConnections()
	require.NoError(t, e.fake.WaitConnected(ctxT(t), 2))
	m, _ := e.inbound(t, rec, dingtalkfake.BotMessage("cid", "staff", "again", false))
	assert.Equal(t, "again", m.Text)
}

type panicking struct{ n int }

func (p *panicking) HandleMessage(context.Context, channels.Message) {
	p.n++
	if p.n == 1 {
		panic("handler bug")
	}
}

func TestHandlerPanicDoesNotKillTheConnection(t *testing.T) {
	e := newEnv(t, nil)
	h := &panicking{}
	e.start(t, h)
	_, id1, err := e.fake.PushBotMessage(dingtalkfake.BotMessage("c", "s", "one", false))
	require.NoError(t, err)
	e.await(t, func() bool { _, ok := e.fake.AckFor(id1); return ok })
	_, id2, err := e.fake.PushBotMessage(dingtalkfake.BotMessage("c", "s", "two", false))
	require.NoError(t, err)
	e.await(t, func() bool { _, ok := e.fake.AckFor(id2); return ok })
	assert.Equal(t, 1, e.fake.Connections())
	assert.Contains(t, e.logs.String(), "handler bug")
}

func TestUnsupportedMessageTypeGetsNotice(t *testing.T) {
	e := newEnv(t, nil)
	rec := newRecorder()
	e.start(t, rec)
	bm := dingtalkfake.BotMessage("cid", "staff", "", false)
	bm.Msgtype = "picture"
	bm.Content = map[string]any{"downloadCode": "abc"}
	_, _, err := e.fake.PushBotMessage(bm)
	require.NoError(t, err)
	e.await(t, func() bool { return len(e.fake.Deliveries()) == 1 })
	assert.Contains(t, e.fake.Deliveries()[0].Text, "文字")
	select {
	case m := <-rec.ch:
		t.Fatalf("picture reached the handler: %+v", m)
	default:
	}
}

func TestRichTextAndAudioBecomeText(t *testing.T) {
	e := newEnv(t, nil)
	rec := newRecorder()
	e.start(t, rec)
	rich := dingtalkfake.BotMessage("cid", "staff", "", false)
	rich.Msgtype = "richText"
	rich.Content = json.RawMessage(`{"richText":[{"text":"看图："},{"pictureDownloadCode":"x"},{"text":"这是什么"}]}`)
	m, _ := e.inbound(t, rec, rich)
	assert.Equal(t, "看图：这是什么", m.Text)
	audio := dingtalkfake.BotMessage("cid", "staff", "", false)
	audio.Msgtype = "audio"
	audio.Content = map[string]any{"recognition": "天气怎么样", "duration": 3}
	m, _ = e.inbound(t, rec, audio)
	assert.Equal(t, "天气怎么样", m.Text)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A Stream connection that cannot get back shows as retrying in the supervisor's state (/readyz
// and citegate_channel_state), with the gateway's answer as the reason, until a socket opens again.
func TestStreamOutageShowsInChannelState(t *testing.T) {
	// Backoff capped low: on a busy machine the outage may last many attempts before the test
	// sees it, and the reconnect after it must not wait a doubled minute.
	e := newEnv(t, func(c *dingtalk.Config) { c.MaxReconnectBackoff = 200 * time.Millisecond })
	sup := channels.NewSupervisor(channels.SupervisorConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx, e.ch, newRecorder()) }()
	t.Cleanup(func() { cancel(); <-done })
	phase := func() channels.State { st, _ := sup.State(dingtalk.Name); return st }
	// The supervisor's state is not a fake event (e.await wakes on those): poll it.
	poll := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond, what)
	}
	poll("connected", func() bool { return phase().Phase == channels.PhaseConnected })

	e.fake.FailNext(http.MethodPost, dingtalkfake.PathOpen, 1_000_000, http.StatusServiceUnavailable, "ServiceUnavailable")
	e.fake.DropConnections()
	poll("retrying during the outage", func() bool { return phase().Phase == channels.PhaseRetrying })
	st := phase()
	assert.Contains(t, st.Reason, "503")
	assert.Positive(t, st.Attempts)

	e.fake.ClearFailures()
	require.NoError(t, e.fake.WaitConnected(ctxT(t), 2))
	poll("connected again", func() bool { return phase().Phase == channels.PhaseConnected })
}

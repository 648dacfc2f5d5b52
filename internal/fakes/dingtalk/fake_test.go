package dingtalkfake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/open-dingtalk/dingtalk-stream-sdk-go/chatbot"
	"github.com/open-dingtalk/dingtalk-stream-sdk-go/client"
	"github.com/open-dingtalk/dingtalk-stream-sdk-go/payload"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dingtalkfake "github.com/citegate/citegate/internal/fakes/dingtalk"
)

// TestFakeSpeaksTheSDKProtocol drives the fake with the official SDK's own stream client and replier:
// if the fake drifted from the real wire format, the SDK would not connect, decode or ack.
func TestFakeSpeaksTheSDKProtocol(t *testing.T) {
	fake := dingtalkfake.New(dingtalkfake.Options{})
	defer fake.Close()

	got := make(chan *chatbot.BotCallbackDataModel, 1)
	cli := client.NewStreamClient(
		client.WithAppCredential(client.NewAppCredentialConfig("ding-client", "ding-secret")),
		client.WithOpenApiHost(fake.URL),
	)
	cli.AutoReconnect = false // Close would otherwise reconnect
	cli.RegisterChatBotCallbackRouter(func(_ context.Context, m *chatbot.BotCallbackDataModel) ([]byte, error) {
		got <- m
		return []byte(""), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, cli.Start(ctx))
	defer cli.Close()
	require.NoError(t, fake.WaitConnected(ctx, 1))

	sent, frameID, err := fake.PushBotMessage(dingtalkfake.BotMessage("cid-1", "staff-1", "hello", true))
	require.NoError(t, err)
	var m *chatbot.BotCallbackDataModel
	select {
	case m = <-got:
	case <-ctx.Done():
		t.Fatal("SDK handler not called")
	}
	assert.Equal(t, sent.MsgId, m.MsgId)
	assert.Equal(t, "2", m.ConversationType)
	assert.True(t, m.IsInAtList)
	require.NoError(t, fake.Await(ctx, func() bool { _, ok := fake.AckFor(frameID); return ok }))
	ack, _ := fake.AckFor(frameID)
	assert.Equal(t, 200, ack.Response.Code)

	// One frame only: the SDK acks each frame from its own goroutine with unsynchronized writes to
	// the websocket, which the race detector reports as soon as two frames are acked (one more reason
	// the channel runs its own connection loop).

	// The SDK's replier reaches the fake's session webhook …
	replier := chatbot.NewChatbotReplier()
	require.NoError(t, replier.SimpleReplyMarkdown(ctx, m.SessionWebhook, []byte("t"), []byte("body")))
	require.Len(t, fake.Deliveries(), 1)
	assert.Equal(t, dingtalkfake.Delivery{Via: "webhook", ConversationID: "cid-1", MsgType: "markdown", Title: "t", Text: "body"}, fake.Deliveries()[0])

	// … and, as on the platform, reports an errcode in a 200 body as success: the pitfall the
	// channel guards against by reading the body itself.
	fake.FailWebhook(1, 130101)
	require.NoError(t, replier.SimpleReplyMarkdown(ctx, m.SessionWebhook, []byte("t"), []byte("lost")))
	assert.Len(t, fake.Deliveries(), 1, "nothing was delivered although the SDK saw no error")
}

func TestFakeRejectsBadCredentialsAndReusedTickets(t *testing.T) {
	fake := dingtalkfake.New(dingtalkfake.Options{})
	defer fake.Close()
	cli := client.NewStreamClient(
		client.WithAppCredential(client.NewAppCredentialConfig("ding-client", "nope")),
		client.WithOpenApiHost(fake.URL),
	)
	cli.AutoReconnect = false
	cli.RegisterChatBotCallbackRouter(func(context.Context, *chatbot.BotCallbackDataModel) ([]byte, error) { return nil, nil })
	err := cli.Start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "InvalidAuthentication")
	assert.Zero(t, fake.Connections())
}

// PushBotMessageEach sends one bot message (one msgId, one session webhook) over every live
// connection, each frame with its own headers.messageId, as a platform's repeated pushes would.
func TestPushBotMessageEachReachesEveryConnection(t *testing.T) {
	fake := dingtalkfake.New(dingtalkfake.Options{})
	defer fake.Close()
	type frame struct {
		conn    int
		msgID   string
		frameID string
		webhook string
	}
	got := make(chan frame, 8)
	for i := range 3 {
		body, _ := json.Marshal(map[string]any{"clientId": "ding-client", "clientSecret": "ding-secret"})
		resp, err := http.Post(fake.URL+dingtalkfake.PathOpen, "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		var ep payload.ConnectionEndpointResponse
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&ep))
		resp.Body.Close()
		c, _, err := websocket.DefaultDialer.Dial(ep.Endpoint+"?ticket="+ep.Ticket, nil)
		require.NoError(t, err)
		defer c.Close()
		go func() {
			for {
				_, data, err := c.ReadMessage()
				if err != nil {
					return
				}
				df, err := payload.DecodeDataFrame(data)
				if err != nil {
					continue
				}
				var bm chatbot.BotCallbackDataModel
				_ = json.Unmarshal([]byte(df.Data), &bm)
				got <- frame{conn: i, msgID: bm.MsgId, frameID: df.GetMessageId(), webhook: bm.SessionWebhook}
				ack := payload.DataFrameResponse{Code: 200, Headers: payload.DataFrameHeader{payload.DataFrameHeaderKMessageId: df.GetMessageId()}, Message: "OK"}
				b, _ := json.Marshal(ack)
				_ = c.WriteMessage(websocket.TextMessage, b)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, fake.WaitConnected(ctx, 3))
	require.NoError(t, fake.Await(ctx, func() bool { return fake.LiveConnections() == 3 }))
	sent, ids, err := fake.PushBotMessageEach(dingtalkfake.BotMessage("cid-1", "staff-1", "hello", false))
	require.NoError(t, err)
	require.Len(t, ids, 3)
	conns := map[int]bool{}
	frames := map[string]bool{}
	for range 3 {
		f := <-got
		conns[f.conn] = true
		frames[f.frameID] = true
		assert.Equal(t, sent.MsgId, f.msgID, "one message")
		assert.Equal(t, sent.SessionWebhook, f.webhook, "one session webhook")
	}
	assert.Len(t, conns, 3, "every connection got it")
	assert.Len(t, frames, 3, "each push has its own frame id")
	require.NoError(t, fake.Await(ctx, func() bool {
		for _, id := range ids {
			if _, ok := fake.AckFor(id); !ok {
				return false
			}
		}
		return true
	}))
}

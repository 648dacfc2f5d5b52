package dingtalk_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/open-dingtalk/dingtalk-stream-sdk-go/chatbot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/dingtalk"
	dingtalkfake "github.com/citegate/citegate/internal/fakes/dingtalk"
)

// received starts the channel and returns the Message for one pushed text message.
func (e *env) received(t *testing.T, group bool, mod func(m *chatbot.BotCallbackDataModel)) channels.Message {
	t.Helper()
	rec := newRecorder()
	e.start(t, rec)
	bm := dingtalkfake.BotMessage("cid-1", "staff-1", "question", group)
	if mod != nil {
		mod(&bm)
	}
	m, _ := e.inbound(t, rec, bm)
	return m
}

func TestMarkdownReplyThroughSessionWebhook(t *testing.T) {
	e := newEnv(t, nil)
	m := e.received(t, false, nil)
	ctx := ctxT(t)
	r, err := e.ch.Reply(ctx, m)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Update(ctx, "partial")) // not streamed without a card
	require.NoError(t, r.Finish(ctx, "## 结论\n\nABC"))
	ds := e.fake.Deliveries()
	require.Len(t, ds, 1)
	assert.Equal(t, dingtalkfake.Delivery{Via: "webhook", ConversationID: "cid-1", MsgType: "markdown", Title: "结论", Text: "## 结论\n\nABC"}, ds[0])
	assert.Empty(t, e.fake.Requests(dingtalkfake.PathToken), "the webhook needs no access token")
	assertNoMarkerBytes(t, e.fake)

	require.NoError(t, e.ch.Send(ctx, m, "已开始新的会话。"))
	ds = e.fake.Deliveries()
	require.Len(t, ds, 2)
	assert.Equal(t, "已开始新的会话。", ds[1].Text)
	assertNoMarkerBytes(t, e.fake)
}

func TestWebhookErrcodeFallsBackToOpenAPI(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(map[bool]string{false: "one-to-one", true: "group"}[group], func(t *testing.T) {
			e := newEnv(t, nil)
			m := e.received(t, group, nil)
			ctx := ctxT(t)
			e.fake.FailWebhook(1, 130101) // HTTP 200 with errcode: the SDK would call this success
			require.NoError(t, e.ch.Send(ctx, m, "hello"))
			require.Len(t, e.fake.Requests(dingtalkfake.PathWebhook), 1)
			ds := e.fake.Deliveries()
			require.Len(t, ds, 1)
			if group {
				assert.Equal(t, dingtalkfake.Delivery{Via: "group", ConversationID: "cid-1", MsgType: "sampleMarkdown", Title: "hello", Text: "hello"}, ds[0])
			} else {
				assert.Equal(t, dingtalkfake.Delivery{Via: "oto", UserIDs: []string{"staff-1"}, MsgType: "sampleMarkdown", Title: "hello", Text: "hello"}, ds[0])
			}
			req := e.fake.Requests(map[bool]string{false: dingtalkfake.PathOToSend, true: dingtalkfake.PathGroupSend}[group])
			require.Len(t, req, 1)
			var body map[string]any
			require.NoError(t, json.Unmarshal(req[0].Body, &body))
			assert.Equal(t, "ding-client", body["robotCode"], "robotCode defaults to the client id")
			assert.NotEmpty(t, req[0].Header.Get("x-acs-dingtalk-access-token"))
			assert.Contains(t, e.logs.String(), "errcode=130101")
			assertNoMarkerBytes(t, e.fake)
		})
	}
}

func TestExpiredWebhookGoesStraightToOpenAPI(t *testing.T) {
	e := newEnv(t, nil)
	m := e.received(t, false, func(bm *chatbot.BotCallbackDataModel) {
		bm.SessionWebhookExpiredTime = time.Now().Add(-time.Minute).UnixMilli()
	})
	ctx := ctxT(t)
	require.NoError(t, e.ch.Send(ctx, m, "late answer"))
	assert.Empty(t, e.fake.Requests(dingtalkfake.PathWebhook), "an expired webhook is not tried")
	ds := e.fake.Deliveries()
	require.Len(t, ds, 1)
	assert.Equal(t, "oto", ds[0].Via)
	assert.Equal(t, "late answer", ds[0].Text)
}

func TestWebhookExpiredByServerFallsBack(t *testing.T) {
	// Our clock says the webhook lives, the platform says it expired (errcode in a 200 body).
	e := newEnv(t, nil)
	m := e.received(t, true, nil)
	m.Ref.(*dingtalk.Ref).WebhookExpiresAt = time.Time{} // unknown expiry
	ref := *m.Ref.(*dingtalk.Ref)
	ref.SessionWebhook = e.fake.URL + dingtalkfake.PathWebhook + "?session=gone"
	m.Ref = &ref
	require.NoError(t, e.ch.Send(ctxT(t), m, "x"))
	ds := e.fake.Deliveries()
	require.Len(t, ds, 1)
	assert.Equal(t, "group", ds[0].Via)
}

func TestOpenAPITokenRefreshAndRateLimit(t *testing.T) {
	e := newEnv(t, nil)
	m := e.received(t, false, func(bm *chatbot.BotCallbackDataModel) {
		bm.SessionWebhookExpiredTime = time.Now().Add(-time.Hour).UnixMilli()
	})
	ctx := ctxT(t)
	require.NoError(t, e.ch.Send(ctx, m, "one"))
	require.Equal(t, 1, e.fake.TokenCalls())
	require.NoError(t, e.ch.Send(ctx, m, "two"))
	assert.Equal(t, 1, e.fake.TokenCalls(), "the token is cached")

	e.fake.ExpireTokens()
	require.NoError(t, e.ch.Send(ctx, m, "three"))
	assert.Equal(t, 2, e.fake.TokenCalls(), "a rejected token is refreshed once")

	e.fake.FailNext(http.MethodPost, dingtalkfake.PathOToSend, 2, http.StatusForbidden, "Forbidden.AccessDenied.QpsLimitForApi")
	require.NoError(t, e.ch.Send(ctx, m, "four"))
	assert.Contains(t, e.logs.String(), "QpsLimitForApi")

	e.fake.FailNext(http.MethodPost, dingtalkfake.PathOToSend, 1, http.StatusBadRequest, "invalidParameter")
	err := e.ch.Send(ctx, m, "five")
	var ae *dingtalk.APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "invalidParameter", ae.Code)

	var texts []string
	for _, d := range e.fake.Deliveries() {
		texts = append(texts, d.Text)
	}
	assert.Equal(t, []string{"one", "two", "three", "four"}, texts)
	assert.NotContains(t, e.logs.String(), "ding-secret")
	assert.NotContains(t, e.logs.String(), "tok-", "tokens never appear in logs")
}

func TestLongMarkdownIsSplitWithNotes(t *testing.T) {
	e := newEnv(t, nil)
	m := e.received(t, false, nil)
	var b strings.Builder
	for i := range 400 {
		b.WriteString(strings.Repeat("引用文本", 10))
		if i%3 == 2 {
			b.WriteString("\n\n")
		} else {
			b.WriteString("\n")
		}
	}
	text := b.String()
	require.NoError(t, e.ch.Send(ctxT(t), m, text))
	ds := e.fake.Deliveries()
	require.Greater(t, len(ds), 2)
	var joined strings.Builder
	for i, d := range ds {
		assert.LessOrEqual(t, utf8.RuneCountInString(d.Text), 5000)
		assert.Contains(t, d.Title, "/")
		note := "（第 " + itoa(i+1) + "/" + itoa(len(ds)) + " 部分"
		require.Contains(t, d.Text, note)
		joined.WriteString(d.Text[:strings.LastIndex(d.Text, "\n\n*"+note)])
	}
	assert.Equal(t, text, joined.String(), "nothing is lost")
	assertNoMarkerBytes(t, e.fake)
}

func itoa(i int) string { return strconv.Itoa(i) }

func cardEnv(t *testing.T) *env {
	return newEnv(t, func(c *dingtalk.Config) { c.CardTemplateID = "tpl-ai.schema"; c.RobotCode = "robot-1" })
}

func TestCardStreamingLifecycle(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(map[bool]string{false: "one-to-one", true: "group"}[group], func(t *testing.T) {
			e := cardEnv(t)
			m := e.received(t, group, nil)
			ctx := ctxT(t)
			r, err := e.ch.Reply(ctx, m)
			require.NoError(t, err)
			require.NoError(t, r.Start(ctx))
			// A repeated text is not streamed again.
			for _, s := range []string{"A", "AB", "AB", "ABC", "ABC"} {
				require.NoError(t, r.Update(ctx, s))
			}
			require.NoError(t, r.Finish(ctx, "ABCD"))

			cards := e.fake.Cards()
			require.Len(t, cards, 1)
			c := cards[0]
			assert.Equal(t, "tpl-ai.schema", c.TemplateID)
			if group {
				assert.Equal(t, "dtv1.card//IM_GROUP.cid-1", c.OpenSpaceID)
				assert.Equal(t, map[string]any{"robotCode": "robot-1"}, c.Create["imGroupOpenDeliverModel"])
			} else {
				assert.Equal(t, "dtv1.card//IM_ROBOT.staff-1", c.OpenSpaceID)
				assert.Equal(t, map[string]any{"spaceType": "IM_ROBOT"}, c.Create["imRobotOpenDeliverModel"])
			}
			assert.Equal(t, "STREAM", c.Create["callbackType"])
			var contents []string
			guids := map[string]bool{}
			for i, s := range c.Streams {
				contents = append(contents, s.Content)
				assert.Equal(t, "content", s.Key)
				assert.True(t, s.IsFull)
				assert.False(t, s.IsError)
				assert.Equal(t, i == len(c.Streams)-1, s.IsFinalize)
				assert.False(t, guids[s.GUID], "a new guid per call")
				guids[s.GUID] = true
				if i > 0 {
					assert.True(t, strings.HasPrefix(s.Content, contents[i-1]), "each update extends the previous")
				}
			}
			assert.Equal(t, []string{"A", "AB", "ABC", "ABCD"}, contents)
			assert.Equal(t, []string{"1", "2", "3"}, c.FlowStatusSeen)
			assert.Equal(t, "ABCD", c.Params["content"])
			assert.Empty(t, e.fake.Deliveries(), "no extra message when the card works")
			assertNoMarkerBytes(t, e.fake)
		})
	}
}

func TestCardFail(t *testing.T) {
	e := cardEnv(t)
	m := e.received(t, false, nil)
	ctx := ctxT(t)
	r, err := e.ch.Reply(ctx, m)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Update(ctx, "部分回答"))
	require.NoError(t, r.Fail(ctx, "抱歉，这次回答失败了：model down"))
	c := e.fake.Cards()[0]
	last := c.Streams[len(c.Streams)-1]
	assert.True(t, last.IsError)
	assert.True(t, last.IsFinalize)
	assert.Equal(t, "部分回答\n\n> ⚠️ 抱歉，这次回答失败了：model down", last.Content)
	assert.Equal(t, "5", c.Params["flowStatus"])
	assertNoMarkerBytes(t, e.fake)
}

func TestCardCreateFailureFallsBackToMarkdown(t *testing.T) {
	e := cardEnv(t)
	m := e.received(t, false, nil)
	ctx := ctxT(t)
	e.fake.FailNext(http.MethodPost, dingtalkfake.PathCardCreate, 1, http.StatusForbidden, "Forbidden.AccessDenied.AccessTokenPermissionDenied")
	r, err := e.ch.Reply(ctx, m)
	require.NoError(t, err)
	require.Error(t, r.Start(ctx))
	require.NoError(t, r.Update(ctx, "A"))
	require.NoError(t, r.Finish(ctx, "AB"))
	assert.Empty(t, e.fake.Requests(dingtalkfake.PathCardStreaming))
	ds := e.fake.Deliveries()
	require.Len(t, ds, 1)
	assert.Equal(t, "AB", ds[0].Text)
	assert.Contains(t, e.logs.String(), "AccessTokenPermissionDenied")
}

func TestCardFinalizeFailureDeliversMarkdown(t *testing.T) {
	e := cardEnv(t)
	m := e.received(t, false, nil)
	ctx := ctxT(t)
	r, err := e.ch.Reply(ctx, m)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Update(ctx, "AB"))
	e.fake.FailNext(http.MethodPut, dingtalkfake.PathCardStreaming, 1, http.StatusInternalServerError, "ServiceUnavailable")
	require.NoError(t, r.Finish(ctx, "ABC"))
	ds := e.fake.Deliveries()
	require.Len(t, ds, 1)
	assert.Equal(t, "ABC", ds[0].Text)
	c := e.fake.Cards()[0]
	assert.Equal(t, "5", c.Params["flowStatus"], "the card says it failed")
	assert.Contains(t, c.Params["content"], "完整回答见下一条消息")
}

func TestCardLongAnswerContinuesInMarkdown(t *testing.T) {
	e := cardEnv(t)
	m := e.received(t, false, nil)
	ctx := ctxT(t)
	r, err := e.ch.Reply(ctx, m)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	para := strings.Repeat("长", 99) + "\n"
	long := strings.Repeat(para, 120) // 12000 runes
	require.NoError(t, r.Update(ctx, long[:len(long)/2]))
	require.NoError(t, r.Update(ctx, long))
	require.NoError(t, r.Finish(ctx, long))
	c := e.fake.Cards()[0]
	for _, s := range c.Streams {
		assert.LessOrEqual(t, utf8.RuneCountInString(s.Content), 8000)
	}
	final := c.Streams[len(c.Streams)-1]
	require.True(t, final.IsFinalize)
	assert.Contains(t, final.Content, "其余部分见下一条消息")
	ds := e.fake.Deliveries()
	require.NotEmpty(t, ds)
	var rest strings.Builder
	for _, d := range ds {
		rest.WriteString(d.Text)
	}
	shown := strings.TrimSuffix(final.Content, "\n\n*（内容较长，其余部分见下一条消息）*")
	assert.Equal(t, strings.Count(long, "长"), strings.Count(shown, "长")+strings.Count(rest.String(), "长"), "nothing is lost")
}

func TestReplyWithoutRefFails(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.ch.Reply(context.Background(), channels.Message{ID: "x"})
	require.Error(t, err)
	require.Error(t, e.ch.Send(context.Background(), channels.Message{ID: "x"}, "t"))
}

func TestCardModeFinishWithoutStartUsesMarkdown(t *testing.T) {
	e := cardEnv(t)
	m := e.received(t, false, nil)
	ctx := ctxT(t)
	r, err := e.ch.Reply(ctx, m)
	require.NoError(t, err)
	require.NoError(t, r.Update(ctx, "ignored"))
	require.NoError(t, r.Finish(ctx, "final"))
	assert.Empty(t, e.fake.Requests(dingtalkfake.PathCardStreaming))
	require.Len(t, e.fake.Deliveries(), 1)
	assert.Equal(t, "final", e.fake.Deliveries()[0].Text)
	require.NoError(t, e.ch.Send(ctx, m, "  \n"), "blank text sends nothing")
	assert.Len(t, e.fake.Deliveries(), 1)
}

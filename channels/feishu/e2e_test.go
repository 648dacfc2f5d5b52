package feishu_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/feishu"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/internal/fakes/feishu"
	"github.com/citegate/citegate/internal/testkit"
	"github.com/citegate/citegate/store"
)

// e2e is the real offline stack (store, agent, dispatcher) behind a long-connection Feishu channel
// talking to the fake through the real SDK.
type e2e struct {
	fake  *feishufake.Server
	stack *testkit.Stack
	h     *harness
}

func newE2E(t *testing.T, opt testkit.StackOptions) *e2e {
	t.Helper()
	fake := newFake(t)
	stack := testkit.NewStack(t, opt)
	e := &e2e{fake: fake, stack: stack}
	e.h = startLongConnWith(t, fake, stack.Dispatcher.Handler, nil)
	return e
}

// push delivers ev over the long connection, checks the ack, and waits for the replies it started.
func (e *e2e) push(t *testing.T, ev feishufake.MessageEvent) {
	t.Helper()
	ack, err := e.fake.Push(ctxT(t), ev.JSON(), 1)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, ack.Code)
	e.stack.Wait(t)
}

// restart simulates a process restart: the channel and the stack stop and a new channel connects
// with the new dispatcher. The old socket stays open (see feishufake.Server.Close) but the fake
// pushes to the newest connection, and the stopped channel would refuse events anyway.
func (e *e2e) restart(t *testing.T) {
	t.Helper()
	e.h.stop()
	e.stack.Restart(t)
	e.h = startLongConnWith(t, e.fake, e.stack.Dispatcher.Handler, nil)
}

func repliesTo(fake *feishufake.Server, messageID string) []feishufake.Reply {
	var out []feishufake.Reply
	for _, r := range fake.Replies() {
		if r.ReplyTo == messageID {
			out = append(out, r)
		}
	}
	return out
}

func cardFor(t *testing.T, fake *feishufake.Server, messageID string) feishufake.Card {
	t.Helper()
	for _, r := range repliesTo(fake, messageID) {
		if id := r.CardID(); id != "" {
			for _, c := range fake.Cards() {
				if c.ID == id {
					return c
				}
			}
		}
	}
	t.Fatalf("no card replied to %s", messageID)
	return feishufake.Card{}
}

func contentOps(c feishufake.Card) []string {
	var out []string
	for _, op := range c.Ops {
		if op.Op == feishufake.OpCardContent && op.Code == 0 {
			out = append(out, op.Content)
		}
	}
	return out
}

func userTexts(t *testing.T, st *store.Store, chatID string) []string {
	t.Helper()
	ctx := ctxT(t)
	sid, err := st.ConversationSession(ctx, "feishu:"+chatID)
	require.NoError(t, err)
	msgs, err := st.ListMessages(ctx, sid)
	require.NoError(t, err)
	var out []string
	for _, m := range msgs {
		if m.Role == store.RoleUser {
			out = append(out, m.Content)
		}
	}
	return out
}

func TestE2EExtractiveAnswer(t *testing.T) {
	e := newE2E(t, testkit.StackOptions{})
	e.push(t, feishufake.MessageEvent{MessageID: "om_x1", ChatID: "oc_x", Text: "What is bbolt?"})
	c := cardFor(t, e.fake, "om_x1")
	assert.False(t, c.Streaming, "streaming closed at the end")
	final := c.Elements["answer"]
	assert.NotEmpty(t, strings.TrimSpace(final))
	assert.NotEqual(t, "正在思考… / Thinking…", final)
	checkCards(t, e.fake)
}

func TestE2ERedeliveryStartsOneRun(t *testing.T) {
	e := newE2E(t, testkit.StackOptions{Model: testkit.NewScriptedModel("一次回答。", []int{2})})
	ev := feishufake.MessageEvent{MessageID: "om_dup", ChatID: "oc_dup", Text: "只回答一次"}
	e.push(t, ev)
	require.Len(t, repliesTo(e.fake, "om_dup"), 1)

	ev.EventID = "ev_dup_retry" // Feishu re-pushes, possibly through another frame and event id
	e.push(t, ev)
	e.push(t, ev)
	assert.Len(t, repliesTo(e.fake, "om_dup"), 1, "a redelivered message must not start a second run")

	e.restart(t)
	e.push(t, ev)
	assert.Len(t, repliesTo(e.fake, "om_dup"), 1, "dedup survives a restart")

	e.push(t, feishufake.MessageEvent{MessageID: "om_after", ChatID: "oc_dup", Text: "新问题"})
	assert.Len(t, repliesTo(e.fake, "om_after"), 1, "the restarted channel serves new messages")
	assert.Equal(t, []string{"只回答一次", "新问题"}, userTexts(t, e.stack.Store, "oc_dup"))
	checkCards(t, e.fake)
}

func TestE2ENoMarkersAnyChunking(t *testing.T) {
	answers := []string{
		"A[^1^]B[^12^]C[^99^]",
		"据报道[^1^]，bbolt 是嵌入式键值库[^2^][^3^]。它使用 B+ 树[^12^]，单写多读[^99^]；[^1234567^]结束[^01^]",
	}
	for ai, answer := range answers {
		for _, chunk := range []int{1, 2, 3, 5, 7} {
			t.Run(fmt.Sprintf("answer%d/chunk%d", ai, chunk), func(t *testing.T) {
				t.Parallel()
				m := testkit.NewScriptedModel(answer, []int{chunk})
				m.Delay = 20 * time.Millisecond // long enough for several paced card updates
				e := newE2E(t, testkit.StackOptions{Model: m})
				e.push(t, feishufake.MessageEvent{MessageID: "om_m", ChatID: "oc_m", Text: "bbolt"})

				assert.Empty(t, e.fake.MarkerViolations())
				c := cardFor(t, e.fake, "om_m")
				assert.Equal(t, citations.Strip(answer), c.Elements["answer"])
				ops := contentOps(c)
				require.NotEmpty(t, ops)
				for i := 1; i < len(ops); i++ {
					assert.True(t, strings.HasPrefix(ops[i], ops[i-1]) || i == 1, "update %d does not extend %q: %q", i, ops[i-1], ops[i])
				}
				checkCards(t, e.fake)
			})
		}
	}
}

func TestE2ESourcesFooterHasNoMarkers(t *testing.T) {
	e := newE2E(t, testkit.StackOptions{Model: testkit.NewScriptedModel("bbolt 是键值库[^1^]。", []int{3}), SourcesFooter: true})
	e.push(t, feishufake.MessageEvent{MessageID: "om_src", ChatID: "oc_src", Text: "bbolt"})
	final := cardFor(t, e.fake, "om_src").Elements["answer"]
	assert.True(t, strings.HasPrefix(final, "bbolt 是键值库。"), final)
	assert.Empty(t, e.fake.MarkerViolations())
}

func TestE2EGroupMention(t *testing.T) {
	e := newE2E(t, testkit.StackOptions{Model: testkit.NewScriptedModel("群里的回答。", []int{4})})
	e.push(t, feishufake.MessageEvent{MessageID: "om_g1", ChatID: "oc_grp", ChatType: "group", Text: "大家好"})
	assert.Empty(t, repliesTo(e.fake, "om_g1"), "groups: no mention, no answer")

	e.push(t, feishufake.MessageEvent{MessageID: "om_g2", ChatID: "oc_grp", ChatType: "group",
		Text: "@_user_1 bbolt 是什么？", Mentions: []feishufake.Mention{e.fake.BotMention("@_user_1")}})
	c := cardFor(t, e.fake, "om_g2")
	assert.Equal(t, "群里的回答。", c.Elements["answer"])
	assert.Equal(t, []string{"bbolt 是什么？"}, userTexts(t, e.stack.Store, "oc_grp"), "the mention is removed")
}

func TestE2ECommands(t *testing.T) {
	m := testkit.NewScriptedModel(strings.Repeat("慢慢地回答。", 40), []int{1})
	m.Delay = 15 * time.Millisecond
	e := newE2E(t, testkit.StackOptions{Model: m, PublicURL: "https://citegate.example.com"})
	lastText := func(id string) string {
		rs := repliesTo(e.fake, id)
		require.NotEmpty(t, rs, "no reply to %s", id)
		return rs[len(rs)-1].Text()
	}

	// /stop while an answer streams.
	ack, err := e.fake.Push(ctxT(t), feishufake.MessageEvent{MessageID: "om_c1", ChatID: "oc_cmd", Text: "讲个长故事"}.JSON(), 1)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, ack.Code)
	waitFor(t, "streaming to begin", func() bool {
		for _, c := range e.fake.Cards() {
			if len(contentOps(c)) >= 2 {
				return true
			}
		}
		return false
	})
	e.push(t, feishufake.MessageEvent{MessageID: "om_c2", ChatID: "oc_cmd", Text: "/stop"})
	assert.Equal(t, "已停止当前回答。", lastText("om_c2"))
	c := cardFor(t, e.fake, "om_c1")
	assert.Contains(t, c.Elements["answer"], "（回答已停止）")
	assert.False(t, c.Streaming)

	e.push(t, feishufake.MessageEvent{MessageID: "om_c3", ChatID: "oc_cmd", Text: "/share"})
	assert.Contains(t, lastText("om_c3"), "https://citegate.example.com/s/")

	ctx := ctxT(t)
	before, err := e.stack.Store.ConversationSession(ctx, "feishu:oc_cmd")
	require.NoError(t, err)
	e.push(t, feishufake.MessageEvent{MessageID: "om_c4", ChatID: "oc_cmd", Text: "/new"})
	assert.Equal(t, "已开始新的会话。", lastText("om_c4"))
	after, err := e.stack.Store.ConversationSession(ctx, "feishu:oc_cmd")
	require.NoError(t, err)
	assert.NotEqual(t, before, after)

	e.push(t, feishufake.MessageEvent{MessageID: "om_c5", ChatID: "oc_cmd", Text: "/stop"})
	assert.Equal(t, "当前没有正在进行的回答。", lastText("om_c5"))
	assert.Empty(t, e.fake.MarkerViolations())
	checkCards(t, e.fake)
}

func TestE2EPlatformErrorMidStream(t *testing.T) {
	m := testkit.NewScriptedModel("第一部分，第二部分，第三部分。", []int{2})
	m.Delay = 20 * time.Millisecond
	e := newE2E(t, testkit.StackOptions{Model: m})
	e.fake.InjectError(feishufake.OpCardContent, 300500, 1)
	e.push(t, feishufake.MessageEvent{MessageID: "om_err", ChatID: "oc_err", Text: "第一问"})

	rs := repliesTo(e.fake, "om_err")
	require.Len(t, rs, 2, "the card, then the answer as text")
	assert.NotEmpty(t, rs[0].CardID())
	assert.Contains(t, rs[1].Text(), "卡片更新失败")
	assert.True(t, strings.HasSuffix(rs[1].Text(), "第一部分，第二部分，第三部分。"))

	e.push(t, feishufake.MessageEvent{MessageID: "om_next", ChatID: "oc_err", Text: "第二问"})
	c := cardFor(t, e.fake, "om_next")
	assert.Equal(t, "第一部分，第二部分，第三部分。", c.Elements["answer"], "the channel keeps serving")
	assert.Contains(t, e.h.logs.String(), "code=300500")
	checkCards(t, e.fake)
}

// failingModel fails every round, as an unreachable LLM would.
type failingModel struct{}

func (failingModel) Name() string { return "failing" }

func (failingModel) Generate(context.Context, agent.ModelRequest, func(string)) (agent.ModelResponse, error) {
	return agent.ModelResponse{}, errors.New("upstream model unavailable")
}

func TestE2EFailedRunShowsFailure(t *testing.T) {
	e := newE2E(t, testkit.StackOptions{Model: failingModel{}})
	e.push(t, feishufake.MessageEvent{MessageID: "om_fr", ChatID: "oc_fr", Text: "hi"})
	c := cardFor(t, e.fake, "om_fr")
	assert.Contains(t, c.Elements["answer"], "⚠️ 抱歉，这次回答失败了")
	assert.False(t, c.Streaming)
	checkCards(t, e.fake)
}

func TestE2EWebhookEncrypted(t *testing.T) {
	fake := newFake(t)
	stack := testkit.NewStack(t, testkit.StackOptions{Model: testkit.NewScriptedModel("webhook 回答[^1^]。", []int{3})})
	ch, _ := newChannel(t, fake, func(c *feishu.Config) {
		c.Mode = feishu.ModeWebhook
		c.VerificationToken = "vtoken"
		c.EncryptKey = "ekey"
	})
	mux := http.NewServeMux()
	for p, h := range ch.Routes() {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, ch.Start(ctx, stack.Dispatcher.Handler(ch)))

	url := srv.URL + feishu.WebhookPath
	ev := feishufake.MessageEvent{MessageID: "om_wh", ChatID: "oc_wh", Text: "webhook?", Token: "vtoken"}
	post := func(opt feishufake.WebhookOptions) int {
		status, _, err := feishufake.PostWebhook(ctxT(t), url, ev.JSON(), opt)
		require.NoError(t, err)
		stack.Wait(t)
		return status
	}
	assert.NotEqual(t, http.StatusOK, post(feishufake.WebhookOptions{EncryptKey: "ekey", BadSignature: true}))
	assert.Empty(t, fake.Replies(), "a bad signature starts nothing")
	assert.Equal(t, http.StatusOK, post(feishufake.WebhookOptions{EncryptKey: "ekey"}))
	assert.Equal(t, http.StatusOK, post(feishufake.WebhookOptions{EncryptKey: "ekey"}), "a redelivery is acked")
	require.Len(t, repliesTo(fake, "om_wh"), 1, "and answered once")
	assert.Equal(t, "webhook 回答。", cardFor(t, fake, "om_wh").Elements["answer"])
	checkCards(t, fake)
}

var _ channels.Channel = (*feishu.Channel)(nil)

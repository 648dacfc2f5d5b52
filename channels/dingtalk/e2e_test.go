package dingtalk_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-dingtalk/dingtalk-stream-sdk-go/chatbot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels/dingtalk"
	"github.com/citegate/citegate/citations"
	dingtalkfake "github.com/citegate/citegate/internal/fakes/dingtalk"
	"github.com/citegate/citegate/internal/testkit"
	"github.com/citegate/citegate/store"
)

// stackEnv is the whole offline citegate core behind a DingTalk channel talking to the fake.
type stackEnv struct {
	*env
	stack *testkit.Stack
	stop  func()
}

func newStackEnv(t *testing.T, opt testkit.StackOptions, mod func(*dingtalk.Config)) *stackEnv {
	t.Helper()
	e := newEnv(t, mod)
	se := &stackEnv{env: e, stack: testkit.NewStack(t, opt)}
	se.run(t)
	return se
}

// run starts the channel with the current dispatcher's handler.
func (se *stackEnv) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	n := se.fake.Connections()
	go func() { done <- se.ch.Start(ctx, se.stack.Dispatcher.Handler(se.ch)) }()
	var once sync.Once
	se.stop = func() { once.Do(func() { stopRun(t, cancel, done) }) }
	t.Cleanup(func() { se.stop() })
	require.NoError(t, se.fake.WaitConnected(ctxT(t), n+1))
}

func stopRun(t *testing.T, cancel context.CancelFunc, done chan error) {
	{
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("Start did not return after cancel")
		}
	}
}

// push sends bm and waits until the channel acked it (the dispatcher has taken it by then).
func (se *stackEnv) push(t *testing.T, bm chatbot.BotCallbackDataModel) chatbot.BotCallbackDataModel {
	t.Helper()
	sent, id, err := se.fake.PushBotMessage(bm)
	require.NoError(t, err)
	se.await(t, func() bool { _, ok := se.fake.AckFor(id); return ok })
	return sent
}

func (se *stackEnv) runs(t *testing.T, conversationID string) []store.Run {
	t.Helper()
	sid, err := se.stack.Store.ConversationSession(context.Background(), "dingtalk:"+conversationID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	runs, err := se.stack.Store.ListRuns(context.Background(), sid)
	require.NoError(t, err)
	return runs
}

func (se *stackEnv) userTexts(t *testing.T, conversationID string) []string {
	t.Helper()
	sid, err := se.stack.Store.ConversationSession(context.Background(), "dingtalk:"+conversationID)
	require.NoError(t, err)
	msgs, err := se.stack.Store.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	var out []string
	for _, m := range msgs {
		if m.Role == store.RoleUser {
			out = append(out, m.Content)
		}
	}
	return out
}

func lastDelivery(se *stackEnv) dingtalkfake.Delivery {
	ds := se.fake.Deliveries()
	if len(ds) == 0 {
		return dingtalkfake.Delivery{}
	}
	return ds[len(ds)-1]
}

func TestE2EOfflineModelAnswers(t *testing.T) {
	for _, card := range []bool{false, true} {
		t.Run(map[bool]string{false: "markdown", true: "card"}[card], func(t *testing.T) {
			se := newStackEnv(t, testkit.StackOptions{}, func(c *dingtalk.Config) {
				if card {
					c.CardTemplateID = "tpl"
				}
			})
			se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "什么是检索增强生成？", false))
			se.stack.Wait(t)
			if card {
				cards := se.fake.Cards()
				require.Len(t, cards, 1)
				assert.Equal(t, "3", cards[0].Params["flowStatus"])
				assert.NotEmpty(t, strings.TrimSpace(cards[0].Params["content"]))
			} else {
				ds := se.fake.Deliveries()
				require.Len(t, ds, 1)
				assert.NotEmpty(t, strings.TrimSpace(ds[0].Text))
			}
			runs := se.runs(t, "cid-1")
			require.Len(t, runs, 1)
			assert.Equal(t, store.PhaseCompleted, runs[0].Phase)
			assertNoMarkerBytes(t, se.fake)
		})
	}
}

func TestE2ERedeliveryStartsOneRunAlsoAfterRestart(t *testing.T) {
	se := newStackEnv(t, testkit.StackOptions{Model: testkit.NewScriptedModel("答案[^1^]。", []int{2})}, nil)
	sent := se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "问题", false))
	se.await(t, func() bool { return len(se.fake.Deliveries()) == 1 })
	// DingTalk pushes the same msgId again with a new frame id (and possibly a new webhook).
	again := sent
	again.SessionWebhook = ""
	se.push(t, again)
	se.push(t, again)
	se.stack.Wait(t)
	assert.Len(t, se.fake.Deliveries(), 1)
	require.Len(t, se.runs(t, "cid-1"), 1)

	se.stop()
	se.stack.Restart(t)
	se.run(t)
	se.push(t, again)
	se.stack.Wait(t)
	assert.Len(t, se.fake.Deliveries(), 1, "dedup survives a restart")
	assert.Len(t, se.runs(t, "cid-1"), 1)

	// A new message is answered as usual.
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "下一个问题", false))
	se.await(t, func() bool { return len(se.fake.Deliveries()) == 2 })
	assert.Equal(t, "答案。", lastDelivery(se).Text)
}

func TestE2ENoMarkerBytesForAnyChunking(t *testing.T) {
	// Only real markers: a literal "[^" that is not a marker would be legitimate text, but the byte
	// check below flags any "[^" at all.
	answer := "开头A[^1^]B[^12^]C[^99^]。\n\n第二段[^1^][^2^]结束[^123456^]，完[^7^]"
	want := citations.Strip(answer)
	for _, chunk := range []int{1, 2, 3, 5, 7} {
		for _, card := range []bool{true, false} {
			t.Run(fmt.Sprintf("chunk=%d/card=%v", chunk, card), func(t *testing.T) {
				model := testkit.NewScriptedModel(answer, []int{chunk})
				model.Delay = 10 * time.Millisecond
				se := newStackEnv(t, testkit.StackOptions{Model: model}, func(c *dingtalk.Config) {
					if card {
						c.CardTemplateID = "tpl"
					}
				})
				se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "问题", chunk%2 == 0))
				se.stack.Wait(t)
				assertNoMarkerBytes(t, se.fake)
				if !card {
					require.Len(t, se.fake.Deliveries(), 1)
					assert.Equal(t, want, se.fake.Deliveries()[0].Text)
					return
				}
				cards := se.fake.Cards()
				require.Len(t, cards, 1)
				streams := cards[0].Streams
				require.GreaterOrEqual(t, len(streams), 2, "the card streamed before the final frame")
				for i := 1; i < len(streams); i++ {
					assert.True(t, strings.HasPrefix(streams[i].Content, streams[i-1].Content),
						"update %d %q does not extend %q", i, streams[i].Content, streams[i-1].Content)
				}
				assert.Equal(t, want, streams[len(streams)-1].Content)
				assert.True(t, streams[len(streams)-1].IsFinalize)
				assert.Equal(t, want, cards[0].Params["content"])
			})
		}
	}
}

func TestE2EGroupMentionHandling(t *testing.T) {
	se := newStackEnv(t, testkit.StackOptions{Model: testkit.NewScriptedModel("好的", []int{3})}, func(c *dingtalk.Config) { c.BotName = "citegate" })
	quiet := dingtalkfake.BotMessage("cid-g", "staff-1", "大家好", true)
	quiet.IsInAtList = false
	se.push(t, quiet)
	se.stack.Wait(t)
	assert.Empty(t, se.fake.Deliveries(), "a group message without a mention is not answered")
	assert.Empty(t, se.runs(t, "cid-g"))

	se.push(t, dingtalkfake.BotMessage("cid-g", "staff-1", "@citegate 今天天气如何", true))
	se.await(t, func() bool { return len(se.fake.Deliveries()) == 1 })
	se.stack.Wait(t)
	assert.Equal(t, "好的", se.fake.Deliveries()[0].Text)
	assert.Equal(t, "cid-g", se.fake.Deliveries()[0].ConversationID)
	assert.Equal(t, []string{"今天天气如何"}, se.userTexts(t, "cid-g"), "the mention is removed")
}

func TestE2ECommands(t *testing.T) {
	model := testkit.NewScriptedModel(strings.Repeat("慢慢回答。", 40), []int{2})
	model.Delay = 15 * time.Millisecond
	se := newStackEnv(t, testkit.StackOptions{Model: model, PublicURL: "https://cg.example.com"}, func(c *dingtalk.Config) { c.CardTemplateID = "tpl" })

	// /stop while an answer streams.
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "讲个长故事", false))
	se.await(t, func() bool { c := se.fake.Cards(); return len(c) == 1 && len(c[0].Streams) >= 1 })
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "/stop", false))
	se.stack.Wait(t)
	assert.Equal(t, "已停止当前回答。", se.fake.Deliveries()[0].Text)
	c := se.fake.Cards()[0]
	final := c.Streams[len(c.Streams)-1]
	assert.True(t, final.IsFinalize)
	assert.True(t, strings.HasSuffix(final.Content, "（回答已停止）"), final.Content)
	runs := se.runs(t, "cid-1")
	require.Len(t, runs, 1)
	assert.Equal(t, store.PhaseCancelled, runs[0].Phase)

	// /share links the conversation.
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "/share", false))
	se.await(t, func() bool { return len(se.fake.Deliveries()) == 2 })
	assert.Contains(t, lastDelivery(se).Text, "https://cg.example.com/s/")

	// /new starts a fresh session: the next question runs there.
	sidBefore, err := se.stack.Store.ConversationSession(context.Background(), "dingtalk:cid-1")
	require.NoError(t, err)
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "/new", false))
	se.await(t, func() bool { return len(se.fake.Deliveries()) == 3 })
	assert.Equal(t, "已开始新的会话。", lastDelivery(se).Text)
	sidAfter, err := se.stack.Store.ConversationSession(context.Background(), "dingtalk:cid-1")
	require.NoError(t, err)
	assert.NotEqual(t, sidBefore, sidAfter)
	assertNoMarkerBytes(t, se.fake)
}

func TestE2EShareBeforeAnyAnswer(t *testing.T) {
	se := newStackEnv(t, testkit.StackOptions{Model: testkit.NewScriptedModel("ok", nil)}, nil)
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "/share", false))
	se.await(t, func() bool { return len(se.fake.Deliveries()) == 1 })
	assert.Contains(t, lastDelivery(se).Text, "还没有内容")
}

func TestE2EPlatformErrorMidStream(t *testing.T) {
	model := testkit.NewScriptedModel(strings.Repeat("流式内容[^1^]。", 30), []int{3})
	model.Delay = 10 * time.Millisecond
	se := newStackEnv(t, testkit.StackOptions{Model: model}, func(c *dingtalk.Config) { c.CardTemplateID = "tpl" })
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "问题一", false))
	se.await(t, func() bool { c := se.fake.Cards(); return len(c) == 1 && len(c[0].Streams) >= 1 })
	// The streaming API breaks for the rest of this answer.
	se.fake.FailNext(http.MethodPut, dingtalkfake.PathCardStreaming, 1000, http.StatusInternalServerError, "ServiceUnavailable")
	se.stack.Wait(t)
	c := se.fake.Cards()[0]
	assert.Equal(t, "5", c.Params["flowStatus"], "the card shows the failure")
	assert.Contains(t, c.Params["content"], "卡片更新失败")
	ds := se.fake.Deliveries()
	require.Len(t, ds, 1, "the answer arrives as a message instead")
	assert.Equal(t, strings.Repeat("流式内容。", 30), ds[0].Text)
	assert.Contains(t, se.logs.String(), "ServiceUnavailable")

	// The channel keeps serving.
	se.fake.ClearFailures()
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "问题二", false))
	se.stack.Wait(t)
	cards := se.fake.Cards()
	require.Len(t, cards, 2)
	assert.Equal(t, "3", cards[1].Params["flowStatus"])
	assertNoMarkerBytes(t, se.fake)
}

func TestE2EMarkdownDeliveryFailureFallsBackToSend(t *testing.T) {
	se := newStackEnv(t, testkit.StackOptions{Model: testkit.NewScriptedModel("回答[^1^]", nil)}, nil)
	// Webhook errcode, then the OpenAPI fails too: Finish reports the error and the dispatcher's
	// plain-text fallback delivers through a fresh attempt.
	se.fake.FailWebhook(1, 88)
	se.fake.FailNext(http.MethodPost, dingtalkfake.PathOToSend, 1, http.StatusInternalServerError, "InternalError")
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "问题", false))
	se.stack.Wait(t)
	ds := se.fake.Deliveries()
	require.Len(t, ds, 1)
	assert.Equal(t, "回答", ds[0].Text)
	assert.Contains(t, se.logs.String(), "InternalError")
}

// failingModel fails every round, as an unreachable LLM would.
type failingModel struct{}

func (failingModel) Name() string { return "failing" }
func (failingModel) Generate(context.Context, agent.ModelRequest, func(string)) (agent.ModelResponse, error) {
	return agent.ModelResponse{}, errors.New("upstream model unavailable")
}

func TestE2ERunFailureShownToUser(t *testing.T) {
	for _, card := range []bool{false, true} {
		t.Run(map[bool]string{false: "markdown", true: "card"}[card], func(t *testing.T) {
			se := newStackEnv(t, testkit.StackOptions{Model: failingModel{}}, func(c *dingtalk.Config) {
				if card {
					c.CardTemplateID = "tpl"
				}
			})
			se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "问题", false))
			se.stack.Wait(t)
			if card {
				c := se.fake.Cards()[0]
				assert.Equal(t, "5", c.Params["flowStatus"])
				assert.Contains(t, c.Params["content"], "回答失败")
				assert.True(t, c.Streams[len(c.Streams)-1].IsError)
			} else {
				require.Len(t, se.fake.Deliveries(), 1)
				assert.Contains(t, se.fake.Deliveries()[0].Text, "回答失败")
			}
		})
	}
}

func TestE2ESurvivesPingTimeout(t *testing.T) {
	se := newStackEnv(t, testkit.StackOptions{Model: testkit.NewScriptedModel("还在", nil)}, func(c *dingtalk.Config) {
		c.KeepAlive = 200 * time.Millisecond
	})
	se.fake.KillConnections()
	require.NoError(t, se.fake.WaitConnected(ctxT(t), 2))
	se.push(t, dingtalkfake.BotMessage("cid-1", "staff-1", "在吗", false))
	se.await(t, func() bool { return len(se.fake.Deliveries()) == 1 })
	assert.Equal(t, "还在", se.fake.Deliveries()[0].Text)
}

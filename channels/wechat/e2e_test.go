package wechat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	wechatfake "github.com/citegate/citegate/internal/fakes/wechat"
	"github.com/citegate/citegate/internal/testkit"
)

// e2e joins the real stack (bbolt, agent loop, dispatcher), the channel, and the fake platform.
type e2e struct {
	stack  *testkit.Stack
	ch     *Channel
	api    *wechatfake.Server
	client *wechatfake.Client
	logs   *testkit.SyncBuffer
	cancel context.CancelFunc
	// literalCaret: the answer holds "[^" that is not part of a marker (ordinary text by the
	// grammar), so only complete markers are checked in the bytes sent.
	literalCaret bool
}

// newE2E builds a plain-mode account (no encoding_aes_key).
func newE2E(t *testing.T, opt testkit.StackOptions) *e2e { t.Helper(); return newE2EKey(t, opt, "") }

// newE2EFor builds an account in the mode a test pushes in: safe mode needs the key, and with the
// key set WeChat (and the channel) takes only encrypted pushes.
func newE2EFor(t *testing.T, opt testkit.StackOptions, safe bool) *e2e {
	t.Helper()
	if safe {
		return newE2EKey(t, opt, wechatfake.NewAESKey())
	}
	return newE2EKey(t, opt, "")
}

func newE2EKey(t *testing.T, opt testkit.StackOptions, key string) *e2e {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if opt.Logger == nil {
		opt.Logger = log
	}
	stack := testkit.NewStack(t, opt)
	api := wechatfake.NewServer(testAppID, testSecret)
	t.Cleanup(api.Close)
	ch, err := New(Config{AppID: testAppID, AppSecret: testSecret, Token: testToken, EncodingAESKey: key,
		APIBaseURL: api.URL, Logger: log})
	require.NoError(t, err)
	ch.api.backoff = time.Millisecond
	mux := http.NewServeMux()
	for p, h := range ch.Routes() {
		mux.Handle(p, h)
	}
	hook := httptest.NewServer(mux)
	t.Cleanup(hook.Close)
	e := &e2e{
		stack: stack, ch: ch, api: api, logs: logs,
		client: &wechatfake.Client{URL: hook.URL + Route, Token: testToken, AppID: testAppID, EncodingAESKey: key},
	}
	e.start(t)
	t.Cleanup(func() {
		e.cancel()
		if !e.literalCaret {
			e.assertMarkerFree(t)
		}
		for _, r := range api.Requests() {
			assert.Empty(t, citations.Markers(string(r.Body)), "marker in %s body %s", r.Path, r.Body)
		}
		assert.NotContains(t, logs.String(), testSecret)
	})
	return e
}

// start (re)starts the channel with the stack's current dispatcher.
func (e *e2e) start(t *testing.T) {
	t.Helper()
	if e.cancel != nil {
		e.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	// The replay cache lives in the stack's database, as in serve.
	e.ch.UseReplayGuard(e.stack.Store)
	require.NoError(t, e.ch.Start(ctx, e.stack.Dispatcher.Handler(e.ch)))
}

// ask pushes a text message as WeChat does (3 identical requests when d.Attempts is 3) and waits for
// the reply to finish.
func (e *e2e) ask(t *testing.T, text string, msgID int64, d wechatfake.Delivery) {
	t.Helper()
	resps, err := e.client.SendText(context.Background(), testOpenID, text, msgID, d)
	require.NoError(t, err)
	for _, r := range resps {
		require.NoError(t, r.Err)
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "success", r.Body)
	}
	e.stack.Wait(t)
}

func (e *e2e) session(t *testing.T) string {
	t.Helper()
	sid, err := e.stack.Store.ConversationSession(context.Background(), "wechat:"+testOpenID)
	require.NoError(t, err)
	return sid
}

func (e *e2e) runs(t *testing.T) int {
	t.Helper()
	runs, err := e.stack.Store.ListRuns(context.Background(), e.session(t))
	require.NoError(t, err)
	return len(runs)
}

func (e *e2e) texts() []string {
	var out []string
	for _, m := range e.api.Messages() {
		out = append(out, m.Content)
	}
	return out
}

// assertMarkerFree checks every byte the fake platform received.
func (e *e2e) assertMarkerFree(t *testing.T) {
	t.Helper()
	assertMarkerFree(t, e.api)
}

func TestE2EExtractiveAnswer(t *testing.T) {
	for _, safe := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "aes"}[safe], func(t *testing.T) {
			e := newE2EFor(t, testkit.StackOptions{SourcesFooter: true}, safe)
			e.ask(t, "年假有多少天？", 1001, wechatfake.Delivery{Safe: safe})
			msgs := e.api.Messages()
			require.NotEmpty(t, msgs)
			assert.Equal(t, testOpenID, msgs[0].ToUser)
			assert.NotEmpty(t, strings.TrimSpace(msgs[0].Content))
			// 1:1 chats need no mention: the answer came without one.
			require.NotEmpty(t, e.api.Typing(), "typing indicator while the agent runs")
			assert.Equal(t, 1, e.runs(t))
			// The stored answer keeps its markers; the chat got it stripped (+ sources footer).
			stored, err := e.stack.Store.ListMessages(context.Background(), e.session(t))
			require.NoError(t, err)
			final := stored[len(stored)-1]
			joined := strings.Join(e.texts(), "")
			assert.Contains(t, joined, strings.TrimSpace(citations.Strip(final.Content))[:min(30, len(citations.Strip(final.Content)))])
			if len(citations.FromMetadata(final.Metadata)) > 0 {
				assert.Contains(t, joined, "来源：")
			}
		})
	}
}

func TestE2ERedeliveryRunsOnce(t *testing.T) {
	for _, safe := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "aes"}[safe], func(t *testing.T) {
			model := testkit.NewScriptedModel("答案[^1^]。", []int{3})
			e := newE2EFor(t, testkit.StackOptions{Model: model}, safe)
			// WeChat re-sends the very same request (same query, same body, same MsgId) up to 3
			// times; each resend gets "success" and nothing starts twice.
			three := wechatfake.Delivery{Attempts: 3, Always: true, Safe: safe}
			e.ask(t, "问题一", 2001, three)
			assert.Equal(t, 1, e.runs(t))
			assert.Equal(t, []string{"答案。"}, e.texts())
			e.ask(t, "问题二", 2002, three)
			assert.Equal(t, 2, e.runs(t))

			// After a restart the dedup keys are still there: a fresh push of the same MsgId (new
			// timestamp and nonce) is acknowledged and not run again.
			e.stack.Restart(t)
			e.start(t)
			e.ask(t, "问题一", 2001, three)
			e.ask(t, "问题二", 2002, three)
			assert.Equal(t, 2, e.runs(t))
			assert.Len(t, e.api.Messages(), 2)

			// A new MsgId after the restart is answered.
			e.ask(t, "问题三", 2003, wechatfake.Delivery{Safe: safe})
			assert.Equal(t, 3, e.runs(t))
			assert.Len(t, e.api.Messages(), 3)
		})
	}
}

func TestE2ENoMarkerForAnyChunking(t *testing.T) {
	answers := []string{
		"A[^1^]B[^12^]C[^99^]",
		"开头[^1^][^2^]，中间[^3^]。结尾[^7^]",
		"[^1[^2^]^]x[^3^][^4^]y[^123456^]",
		// Not markers, so ordinary text that reaches the user as it is.
		"literal [^ half [^a^] and [^1 end",
	}
	for ai, answer := range answers {
		for _, size := range []int{1, 2, 3, 5, 7} {
			t.Run(fmt.Sprintf("answer%d/chunk%d", ai, size), func(t *testing.T) {
				t.Parallel() // each case has its own stack and fake
				e := newE2E(t, testkit.StackOptions{Model: testkit.NewScriptedModel(answer, []int{size})})
				e.literalCaret = strings.Contains(citations.Strip(answer), "[^")
				e.ask(t, "问题", int64(3000+size), wechatfake.Delivery{})
				assert.Equal(t, []string{citations.Strip(answer)}, e.texts())
				for _, m := range e.texts() {
					assert.Empty(t, citations.Markers(m))
				}
			})
		}
	}
}

func TestE2ELongAnswerIsSplit(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 7000; i++ {
		fmt.Fprintf(&b, "第%d段：这是一个比较长的回答[^%d^]，用于测试拆分。\n", i, i%5+1)
	}
	answer := b.String()
	e := newE2E(t, testkit.StackOptions{Model: testkit.NewScriptedModel(answer, []int{5, 7, 3})})
	e.ask(t, "写长一点", 4001, wechatfake.Delivery{})
	texts := e.texts()
	require.Equal(t, splitText(citations.Strip(answer), maxPartBytes, maxParts), texts)
	require.GreaterOrEqual(t, len(texts), 4)
	for i, m := range texts {
		assert.LessOrEqual(t, len(m), maxPartBytes)
		assert.True(t, strings.HasSuffix(m, fmt.Sprintf("(%d/%d)", i+1, len(texts))))
	}
}

func TestE2ECommands(t *testing.T) {
	model := testkit.NewScriptedModel("一个慢慢生成的回答，内容很长很长。", []int{1})
	e := newE2E(t, testkit.StackOptions{Model: model, PublicURL: "https://gw.example.com"})

	e.ask(t, "/share", 5001, wechatfake.Delivery{})
	assert.Equal(t, []string{"当前会话还没有内容可分享。"}, e.texts())

	e.ask(t, "你好", 5002, wechatfake.Delivery{})
	first := e.session(t)
	e.ask(t, "/share", 5003, wechatfake.Delivery{})
	texts := e.texts()
	require.Len(t, texts, 3)
	assert.Contains(t, texts[2], "https://gw.example.com/s/")

	e.ask(t, "/new", 5004, wechatfake.Delivery{})
	assert.Equal(t, "已开始新的会话。", e.texts()[3])
	assert.NotEqual(t, first, e.session(t))

	// /stop while an answer is being generated.
	model.Delay = 30 * time.Millisecond
	ctx := context.Background()
	_, err := e.client.SendText(ctx, testOpenID, "讲个长故事", 5005, wechatfake.Delivery{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(e.api.Typing()) > 0 }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	e.ask(t, "/stop", 5006, wechatfake.Delivery{})
	texts = e.texts()
	require.Len(t, texts, 6)
	assert.Contains(t, texts, "已停止当前回答。")
	stopped := texts[4]
	if stopped == "已停止当前回答。" {
		stopped = texts[5]
	}
	assert.Contains(t, stopped, "（回答已停止）")
}

func TestE2EPlatformErrorThenNextMessage(t *testing.T) {
	e := newE2E(t, testkit.StackOptions{Model: testkit.NewScriptedModel("回答[^1^]", []int{2})})
	// The answer's send fails (WeChat busy beyond the retries); the dispatcher's plain-text fallback
	// then reaches the user.
	e.api.InjectError(wechatfake.PathSend, CodeSystemBusy, "system error", maxBusyRetries+1)
	e.ask(t, "第一问", 6001, wechatfake.Delivery{})
	assert.Equal(t, []string{"回答"}, e.texts())
	assert.Contains(t, e.logs.String(), "errcode=-1")

	// The 48-hour window is closed: nothing can reach the user, the error is logged with its code,
	// the dispatcher does not waste a second call on a fallback (the error is permanent), and the
	// channel keeps serving.
	e.api.InjectError(wechatfake.PathSend, CodeWindowExpired, "response out of time limit or subscription is canceled", 1)
	e.ask(t, "第二问", 6002, wechatfake.Delivery{})
	assert.Len(t, e.api.Messages(), 1)
	assert.Contains(t, e.logs.String(), "errcode=45015")

	e.ask(t, "第三问", 6003, wechatfake.Delivery{})
	assert.Equal(t, []string{"回答", "回答"}, e.texts())
	assert.Equal(t, 3, e.runs(t))
}

// failingModel fails every run, as an unreachable LLM would.
type failingModel struct{}

func (failingModel) Name() string { return "failing" }
func (failingModel) Generate(context.Context, agent.ModelRequest, func(string)) (agent.ModelResponse, error) {
	return agent.ModelResponse{}, errors.New("upstream model unavailable [^1^]")
}

func TestE2EModelFailureIsShown(t *testing.T) {
	e := newE2E(t, testkit.StackOptions{Model: failingModel{}})
	e.ask(t, "问题", 7001, wechatfake.Delivery{})
	texts := e.texts()
	require.Len(t, texts, 1)
	assert.True(t, strings.HasPrefix(texts[0], "抱歉"), texts[0])
	assert.Contains(t, texts[0], "模型服务暂时不可用")
	assert.NotContains(t, texts[0], "upstream model unavailable", "the cause goes to the log, not to the user")
}

// TestE2EForgeriesStartNothing pushes forged requests through the whole stack: none starts a run
// or sends anything to the (spoofed) user, and the real push afterwards is answered.
func TestE2EForgeriesStartNothing(t *testing.T) {
	model := testkit.NewScriptedModel("答案[^1^]。", []int{3})
	e := newE2EFor(t, testkit.StackOptions{Model: model}, true)
	ctx := context.Background()
	year2100 := strconv.FormatInt(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), 10)
	forgeries := []wechatfake.Delivery{
		{Safe: false},                     // plaintext, correctly signed, while the key is set
		{Safe: true, Timestamp: year2100}, // encrypted and signed, far from the clock
		{Safe: true, BadSignature: true},
	}
	for i, d := range forgeries {
		resps, err := e.client.SendText(ctx, testOpenID, "伪造", int64(8000+i), d)
		require.NoError(t, err)
		require.NoError(t, resps[0].Err)
		assert.Equal(t, http.StatusForbidden, resps[0].Status, "forgery %d", i)
	}
	e.stack.Wait(t)
	assert.Zero(t, model.Calls(), "no run started")
	assert.Empty(t, e.api.Messages(), "no customer-service message sent")
	assert.Empty(t, e.api.Typing())

	e.ask(t, "真的问题", 8100, wechatfake.Delivery{Safe: true})
	assert.Equal(t, []string{"答案。"}, e.texts())
}

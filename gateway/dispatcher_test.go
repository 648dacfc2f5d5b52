package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/internal/testkit"
	"github.com/citegate/citegate/store"
)

// recChannel is an in-process channels.Channel that records every call the dispatcher makes, so the
// dispatcher's own rules can be checked apart from any platform.
type recChannel struct {
	rate float64

	mu      sync.Mutex
	replies []*recReply
	sends   []string
	log     []string // every finish, fail and send in delivery order: "finish: text", "send: text"
}

type op struct {
	kind string // start, update, finish, fail
	text string
	at   time.Time
}

type recReply struct {
	ch  *recChannel
	msg channels.Message
	ops []op
}

func (c *recChannel) Name() string                                        { return "rec" }
func (c *recChannel) Start(ctx context.Context, h channels.Handler) error { return nil }
func (c *recChannel) Limits() channels.Limits                             { return channels.Limits{UpdatesPerSecond: c.rate} }
func (c *recChannel) Reply(ctx context.Context, m channels.Message) (channels.Reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &recReply{ch: c, msg: m}
	c.replies = append(c.replies, r)
	return r, nil
}
func (c *recChannel) Send(ctx context.Context, m channels.Message, text string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sends = append(c.sends, text)
	c.log = append(c.log, "send: "+text)
	return nil
}

func (r *recReply) add(kind, text string) error {
	r.ch.mu.Lock()
	defer r.ch.mu.Unlock()
	r.ops = append(r.ops, op{kind, text, time.Now()})
	if kind == "finish" || kind == "fail" {
		r.ch.log = append(r.ch.log, kind+": "+text)
	}
	return nil
}
func (r *recReply) Start(ctx context.Context) error               { return r.add("start", "") }
func (r *recReply) Update(ctx context.Context, text string) error { return r.add("update", text) }
func (r *recReply) Finish(ctx context.Context, text string) error { return r.add("finish", text) }
func (r *recReply) Fail(ctx context.Context, reason string) error { return r.add("fail", reason) }

func (c *recChannel) snapshot() ([][]op, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]op
	for _, r := range c.replies {
		out = append(out, append([]op(nil), r.ops...))
	}
	return out, append([]string(nil), c.sends...)
}

func msg(id, text string) channels.Message {
	return channels.Message{Channel: "rec", ID: id, ConversationID: "conv-1", SenderID: "u1", Text: text}
}

// assertMarkerFree checks a text that reached a platform.
func assertMarkerFree(t *testing.T, s string) {
	t.Helper()
	assert.Empty(t, citations.Markers(s), "marker in %q", s)
	assert.NotContains(t, s, "[^", "partial marker in %q", s)
}

func runCount(t *testing.T, st *testkit.Stack, convKey string) int {
	t.Helper()
	return len(runsOf(t, st, convKey))
}

// runsOf returns the runs of the conversation's bound session, oldest first.
func runsOf(t *testing.T, st *testkit.Stack, convKey string) []store.Run {
	t.Helper()
	sid, err := st.Store.ConversationSession(context.Background(), convKey)
	if err != nil {
		return nil
	}
	runs, err := st.Store.ListRuns(context.Background(), sid)
	require.NoError(t, err)
	return runs
}

func TestDispatcherAnswersWithVerifiedSourcesFooter(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{SourcesFooter: true})
	ch := &recChannel{rate: 20}
	h := st.Dispatcher.Handler(ch)
	h.HandleMessage(context.Background(), msg("m1", "电子发票抬头写错了怎么办？"))
	st.Wait(t)

	replies, _ := ch.snapshot()
	require.Len(t, replies, 1)
	ops := replies[0]
	require.Equal(t, "start", ops[0].kind)
	last := ops[len(ops)-1]
	require.Equal(t, "finish", last.kind)
	assert.Contains(t, last.text, "红冲")
	assert.Contains(t, last.text, "来源：\n1. ")
	assert.Contains(t, last.text, "http://127.0.0.1:8080/kb/")
	prev := ""
	for _, o := range ops {
		assertMarkerFree(t, o.text)
		if o.kind == "update" {
			assert.True(t, strings.HasPrefix(o.text, prev), "update %q does not extend %q", o.text, prev)
			prev = o.text
		}
	}
}

func TestDispatcherDedupAcrossRestart(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{})
	ch := &recChannel{rate: 0}
	st.Dispatcher.Handler(ch).HandleMessage(context.Background(), msg("dup-1", "年假怎么申请？"))
	st.Dispatcher.Handler(ch).HandleMessage(context.Background(), msg("dup-1", "年假怎么申请？"))
	st.Wait(t)
	assert.Equal(t, 1, runCount(t, st, "rec:conv-1"))

	st.Restart(t)
	st.Dispatcher.Handler(ch).HandleMessage(context.Background(), msg("dup-1", "年假怎么申请？"))
	st.Wait(t)
	assert.Equal(t, 1, runCount(t, st, "rec:conv-1"), "a redelivery after restart starts no run")
	replies, _ := ch.snapshot()
	assert.Len(t, replies, 1)
}

func TestDispatcherGroupNeedsMention(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{})
	ch := &recChannel{}
	h := st.Dispatcher.Handler(ch)
	m := msg("g1", "报销流程是什么？")
	m.Group, m.ConversationID = true, "group-1"
	h.HandleMessage(context.Background(), m)
	st.Wait(t)
	assert.Equal(t, 0, runCount(t, st, "rec:group-1"))

	m.ID, m.Mentioned = "g2", true
	h.HandleMessage(context.Background(), m)
	st.Wait(t)
	assert.Equal(t, 1, runCount(t, st, "rec:group-1"))
}

func TestDispatcherStreamingNeverShowsMarkers(t *testing.T) {
	answer := "A[^1^]B[^12^]C[^99^]发票[^2^]红冲[^1^]。[[^1^]] end[^3^]"
	for _, sizes := range [][]int{{1}, {2}, {3}, {5}, {7}, {1, 4, 2}} {
		t.Run(fmt.Sprint(sizes), func(t *testing.T) {
			model := testkit.NewScriptedModel(answer, sizes)
			st := testkit.NewStack(t, testkit.StackOptions{Model: model})
			ch := &recChannel{rate: 1000}
			st.Dispatcher.Handler(ch).HandleMessage(context.Background(), msg("s1", "电子发票"))
			st.Wait(t)
			replies, _ := ch.snapshot()
			require.Len(t, replies, 1)
			ops := replies[0]
			prev := ""
			for _, o := range ops {
				assertMarkerFree(t, o.text)
				if o.kind == "update" {
					require.True(t, strings.HasPrefix(o.text, prev))
					prev = o.text
				}
			}
			last := ops[len(ops)-1]
			require.Equal(t, "finish", last.kind)
			assert.Equal(t, citations.Strip(answer), last.text)
		})
	}
}

func TestDispatcherPacesUpdates(t *testing.T) {
	model := testkit.NewScriptedModel(strings.Repeat("字", 200), []int{1})
	model.Delay = time.Millisecond
	st := testkit.NewStack(t, testkit.StackOptions{Model: model})
	ch := &recChannel{rate: 5}
	st.Dispatcher.Handler(ch).HandleMessage(context.Background(), msg("p1", "q"))
	st.Wait(t)
	replies, _ := ch.snapshot()
	require.Len(t, replies, 1)
	var updates []time.Time
	for _, o := range replies[0] {
		if o.kind == "update" {
			updates = append(updates, o.at)
		}
	}
	require.NotEmpty(t, updates)
	for i := 1; i < len(updates); i++ {
		assert.GreaterOrEqual(t, updates[i].Sub(updates[i-1]), 190*time.Millisecond, "updates closer than 1/rate")
	}
}

func TestDispatcherCommands(t *testing.T) {
	model := testkit.NewScriptedModel(strings.Repeat("慢慢回答。", 100), []int{2})
	model.Delay = 5 * time.Millisecond
	st := testkit.NewStack(t, testkit.StackOptions{Model: model, PublicURL: "https://gw.example"})
	ch := &recChannel{rate: 2}
	h := st.Dispatcher.Handler(ch)
	ctx := context.Background()

	h.HandleMessage(ctx, msg("c0", "/share"))
	st.Wait(t)
	_, sends := ch.snapshot()
	require.Len(t, sends, 1)
	assert.Contains(t, sends[0], "还没有内容")

	h.HandleMessage(ctx, msg("c1", "第一个问题"))
	require.Eventually(t, func() bool { r, _ := ch.snapshot(); return len(r) == 1 && len(r[0]) > 0 }, 30*time.Second, 5*time.Millisecond)
	h.HandleMessage(ctx, msg("c2", "/stop"))
	st.Wait(t)
	replies, sends := ch.snapshot()
	assert.Contains(t, sends[len(sends)-1], "已停止")
	last := replies[0][len(replies[0])-1]
	assert.Equal(t, "finish", last.kind)
	assert.Contains(t, last.text, "回答已停止")
	sid1, err := st.Store.ConversationSession(ctx, "rec:conv-1")
	require.NoError(t, err)

	h.HandleMessage(ctx, msg("c3", "/share"))
	st.Wait(t)
	_, sends = ch.snapshot()
	link := sends[len(sends)-1]
	require.Contains(t, link, "https://gw.example/s/")
	token := link[strings.Index(link, "/s/")+3:]
	share, err := st.Store.GetShare(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, sid1, share.SessionID)

	h.HandleMessage(ctx, msg("c4", "/new"))
	sid2, err := st.Store.ConversationSession(ctx, "rec:conv-1")
	require.NoError(t, err)
	assert.NotEqual(t, sid1, sid2)

	h.HandleMessage(ctx, msg("c5", "/stop"))
	st.Wait(t)
	_, sends = ch.snapshot()
	assert.Contains(t, sends[len(sends)-1], "没有正在进行")
}

type failingModel struct{}

func (failingModel) Name() string { return "failing" }
func (failingModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	return agent.ModelResponse{}, errors.New("upstream exploded")
}

func TestDispatcherFailureReachesUser(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{Model: failingModel{}})
	ch := &recChannel{rate: 5}
	h := st.Dispatcher.Handler(ch)
	h.HandleMessage(context.Background(), msg("f1", "q"))
	h.HandleMessage(context.Background(), msg("f2", "q again"))
	st.Wait(t)
	replies, _ := ch.snapshot()
	require.Len(t, replies, 2, "the channel keeps serving after a failure")
	for _, ops := range replies {
		last := ops[len(ops)-1]
		assert.Equal(t, "fail", last.kind)
		assert.Equal(t, "抱歉，这次回答失败了：模型服务暂时不可用，请稍后再试。", last.text, "a plain sentence; the cause goes to the log")
	}
}

// TestDispatcherConcurrentFirstMessagesShareOneSession: webhook channels deliver concurrently; the
// first messages of a new conversation must all land in one session, not each create their own
// (the conversation would be bound to one and the other answers orphaned).
func TestDispatcherConcurrentFirstMessagesShareOneSession(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{})
	ch := &recChannel{rate: 0}
	h := st.Dispatcher.Handler(ch)
	const n = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			h.HandleMessage(context.Background(), msg(fmt.Sprintf("c-%d", i), "年假怎么申请？"))
		}()
	}
	close(start)
	wg.Wait()
	st.Wait(t)
	sessions, err := st.Store.ListSessions(context.Background(), "rec:conv-1")
	require.NoError(t, err)
	assert.Len(t, sessions, 1, "one conversation, one session")
	assert.Equal(t, n, runCount(t, st, "rec:conv-1"))
}

// orderChannel records in which order answers are delivered; the first answer's delivery is slow,
// as a platform API call can be.
type orderChannel struct {
	recChannel
	mu       sync.Mutex
	finished []string // message ids in delivery order
}

type orderReply struct {
	ch  *orderChannel
	msg channels.Message
}

func (c *orderChannel) Reply(ctx context.Context, m channels.Message) (channels.Reply, error) {
	return &orderReply{ch: c, msg: m}, nil
}
func (r *orderReply) Start(ctx context.Context) error               { return nil }
func (r *orderReply) Update(ctx context.Context, text string) error { return nil }
func (r *orderReply) Finish(ctx context.Context, text string) error {
	if r.msg.ID == "o1" {
		time.Sleep(300 * time.Millisecond)
	}
	r.ch.mu.Lock()
	defer r.ch.mu.Unlock()
	r.ch.finished = append(r.ch.finished, r.msg.ID)
	return nil
}
func (r *orderReply) Fail(ctx context.Context, reason string) error { return r.Finish(ctx, reason) }

// TestDispatcherDeliversAnswersInOrder: the runs of a conversation run one after the other, and so
// must their answers reach the platform: a slow delivery of the first answer must not let the second
// overtake it.
func TestDispatcherDeliversAnswersInOrder(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{})
	ch := &orderChannel{}
	h := st.Dispatcher.Handler(ch)
	h.HandleMessage(context.Background(), msg("o1", "年假怎么申请？"))
	h.HandleMessage(context.Background(), msg("o2", "电子发票抬头写错了怎么办？"))
	st.Wait(t)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	assert.Equal(t, []string{"o1", "o2"}, ch.finished)
}

func (c *recChannel) deliveries() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

// TestDispatcherStopNoticeFollowsTheStoppedAnswer: the /stop notice goes through the
// conversation's reply queue, so it reaches the platform after the answer's own ending.
func TestDispatcherStopNoticeFollowsTheStoppedAnswer(t *testing.T) {
	model := testkit.NewScriptedModel(strings.Repeat("慢慢回答。", 200), []int{2})
	model.Delay = 5 * time.Millisecond
	st := testkit.NewStack(t, testkit.StackOptions{Model: model})
	ch := &recChannel{rate: 0}
	h := st.Dispatcher.Handler(ch)
	ctx := context.Background()
	h.HandleMessage(ctx, msg("s1", "第一个问题"))
	// Wait until the run is answering (its reply started), then stop it.
	require.Eventually(t, func() bool { r, _ := ch.snapshot(); return len(r) == 1 && len(r[0]) > 0 }, 30*time.Second, 5*time.Millisecond)
	h.HandleMessage(ctx, msg("s2", "/stop"))
	st.Wait(t)
	got := ch.deliveries()
	require.Len(t, got, 2, "%q", got)
	assert.True(t, strings.HasPrefix(got[0], "finish: "), "%q", got)
	assert.Contains(t, got[0], "（回答已停止）")
	assert.Equal(t, "send: 已停止当前回答。", got[1])
}

// TestDispatcherRedeliveryAfterFailedSubmitRuns: a message stored on arrival whose submit then
// failed is recorded as a FAILED run with the reason the user was told, and its id is forgotten, so
// the platform's redelivery runs it. The user is told in plain words.
func TestDispatcherRedeliveryAfterFailedSubmitRuns(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{})
	ch := &recChannel{rate: 0}
	ctx := context.Background()
	require.NoError(t, st.Agent.Close(ctx)) // every submit now fails (agent closed)
	st.Dispatcher.Handler(ch).HandleMessage(ctx, msg("r1", "年假怎么申请？"))
	st.Wait(t)
	_, sends := ch.snapshot()
	require.Len(t, sends, 1)
	assert.Equal(t, "服务正在重启，请稍后重新发送这条消息。", sends[0])
	assert.NotContains(t, sends[0], "agent:")
	runs := runsOf(t, st, "rec:conv-1")
	require.Len(t, runs, 1, "the refused turn is kept, not lost")
	assert.Equal(t, store.PhaseFailed, runs[0].Phase)
	assert.Equal(t, "服务正在重启，请稍后重新发送这条消息。", runs[0].Error)

	st.Restart(t) // the server is back; the platform redelivers
	st.Dispatcher.Handler(ch).HandleMessage(ctx, msg("r1", "年假怎么申请？"))
	st.Wait(t)
	runs = runsOf(t, st, "rec:conv-1")
	require.Len(t, runs, 2, "the redelivered message runs")
	assert.Equal(t, store.PhaseCompleted, runs[1].Phase)
	st.Dispatcher.Handler(ch).HandleMessage(ctx, msg("r1", "年假怎么申请？"))
	st.Wait(t)
	assert.Equal(t, 2, runCount(t, st, "rec:conv-1"), "once it ran, it is a duplicate again")
}

// TestDispatcherShareNeedsPublicURL: without a configured public URL, /share explains what is
// missing instead of handing out a loopback link.
func TestDispatcherShareNeedsPublicURL(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{NoShareURL: true})
	ch := &recChannel{rate: 0}
	h := st.Dispatcher.Handler(ch)
	h.HandleMessage(context.Background(), msg("a1", "年假怎么申请？"))
	h.HandleMessage(context.Background(), msg("a2", "/share"))
	st.Wait(t)
	_, sends := ch.snapshot()
	require.NotEmpty(t, sends)
	last := sends[len(sends)-1]
	assert.Contains(t, last, "--public-url")
	assert.NotContains(t, last, "127.0.0.1")
	assert.NotContains(t, last, "/s/")
}

// TestDispatcherHidesUnverifiedLinks: the link rule applies to every byte a channel gets, streamed
// and final: a URL the run never saw is hidden (link text kept, bare URL replaced by the notice),
// the user's own URL stays, and the hidden links are counted per model and channel.
func TestDispatcherHidesUnverifiedLinks(t *testing.T) {
	answer := "见[官网](https://evil.example.com/login)和 https://evil.example.net/x 。您给的页面 https://user.example.org/page 已看过[^1^]。"
	model := testkit.NewScriptedModel(answer, []int{1, 3, 7})
	st := testkit.NewStack(t, testkit.StackOptions{Model: model})
	reg := prometheus.NewRegistry()
	d, err := gateway.NewDispatcher(gateway.DispatcherConfig{Store: st.Store, Agent: st.Agent, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	ch := &recChannel{rate: 1000}
	d.Handler(ch).HandleMessage(context.Background(), msg("l1", "请看 https://user.example.org/page 这个页面"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, d.Wait(ctx))

	replies, _ := ch.snapshot()
	require.Len(t, replies, 1)
	ops := replies[0]
	for _, o := range ops {
		assert.NotContains(t, o.text, "evil.example", "%s %q", o.kind, o.text)
		assertMarkerFree(t, o.text)
	}
	last := ops[len(ops)-1]
	require.Equal(t, "finish", last.kind)
	assert.Contains(t, last.text, "见官网和 "+citations.HiddenLinkNotice)
	assert.Contains(t, last.text, "https://user.example.org/page")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var hidden float64
	for _, mf := range mfs {
		if mf.GetName() == "citegate_links_hidden_total" {
			for _, m := range mf.GetMetric() {
				hidden += m.GetCounter().GetValue()
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				assert.Equal(t, map[string]string{"model": "scripted", "channel": "rec"}, labels)
			}
		}
	}
	assert.Equal(t, 2.0, hidden)
}

// tripStore records the dispatcher's inbound store calls.
type tripStore struct {
	gateway.DispatchStore
	mu    sync.Mutex
	calls []string
	fail  error // when set, AcceptInbound fails with it
}

func (s *tripStore) record(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, name)
}

func (s *tripStore) AcceptInbound(ctx context.Context, in store.Inbound) (store.Accepted, error) {
	s.record("AcceptInbound")
	if s.fail != nil {
		return store.Accepted{}, s.fail
	}
	return s.DispatchStore.AcceptInbound(ctx, in)
}

func (s *tripStore) UnmarkSeen(ctx context.Context, key string) error {
	s.record("UnmarkSeen")
	return s.DispatchStore.UnmarkSeen(ctx, key)
}

func (s *tripStore) ConcludeRun(ctx context.Context, c store.Conclusion) (store.Run, store.Message, error) {
	s.record("ConcludeRun")
	return s.DispatchStore.ConcludeRun(ctx, c)
}

// TestDispatcherInboundIsOneStoreTrip: a question, /new, /stop and a duplicate each take exactly one
// store call before the agent (dedup, session and the queued turn together); a store failure is
// told to the user in plain words and leaves nothing marked, so a redelivery is processed.
func TestDispatcherInboundIsOneStoreTrip(t *testing.T) {
	st := testkit.NewStack(t, testkit.StackOptions{})
	ts := &tripStore{DispatchStore: st.Store}
	d, err := gateway.NewDispatcher(gateway.DispatcherConfig{Store: ts, Agent: st.Agent, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	ch := &recChannel{rate: 0}
	h := d.Handler(ch)
	ctx := context.Background()
	for _, m := range []channels.Message{msg("t1", "年假怎么申请？"), msg("t1", "年假怎么申请？"), msg("t2", "/new"), msg("t3", "/stop")} {
		h.HandleMessage(ctx, m)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, d.Wait(waitCtx))
	assert.Equal(t, []string{"AcceptInbound", "AcceptInbound", "AcceptInbound", "AcceptInbound"}, ts.calls)

	ts.fail = errors.New("store: accept inbound: disk on fire")
	h.HandleMessage(ctx, msg("t4", "电子发票抬头写错了怎么办？"))
	require.NoError(t, d.Wait(waitCtx))
	_, sends := ch.snapshot()
	assert.Equal(t, "服务暂时不可用，请稍后再试。", sends[len(sends)-1])
	ts.fail = nil
	h.HandleMessage(ctx, msg("t4", "电子发票抬头写错了怎么办？"))
	require.NoError(t, d.Wait(waitCtx))
	replies, _ := ch.snapshot()
	assert.Len(t, replies, 2, "the redelivery after the failure is answered")
}

package gateway

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/internal/pgtest"
	"github.com/citegate/citegate/store"
)

// holdMark in a question makes orderModel wait until the test releases that question; failMark
// makes it fail the answer (after the hold).
const (
	holdMark = "【等】"
	failMark = "【错】"
)

// orderLog is the one record, across replicas, of what the models and the platform saw, in the
// order it happened.
type orderLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *orderLog) add(s string) {
	l.mu.Lock()
	l.entries = append(l.entries, s)
	l.mu.Unlock()
}

func (l *orderLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.entries...)
}

// index is the position of the first entry equal to s, or -1.
func (l *orderLog) index(s string) int {
	for i, e := range l.snapshot() {
		if e == s {
			return i
		}
	}
	return -1
}

// orderModel answers every question at once, except one with holdMark, which it holds until the
// test releases it; it logs the start and end of every answer.
type orderModel struct {
	log     *orderLog
	held    chan string
	release chan struct{}
}

func (m *orderModel) Name() string { return "order" }

func (m *orderModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	q := ""
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			q = msg.Content
		}
	}
	m.log.add("start " + q)
	if strings.Contains(q, holdMark) {
		m.held <- q
		select {
		case <-m.release:
		case <-ctx.Done():
			m.log.add("end " + q)
			return agent.ModelResponse{}, ctx.Err()
		}
	}
	m.log.add("end " + q)
	if strings.Contains(q, failMark) {
		return agent.ModelResponse{}, errors.New("the model failed")
	}
	return agent.ModelResponse{Text: "答复：" + q}, nil
}

// logChannel is a chat channel that logs each final answer and notice it delivers.
type logChannel struct{ log *orderLog }

func (c logChannel) Name() string                                  { return "wechat" }
func (c logChannel) Start(context.Context, channels.Handler) error { return nil }
func (c logChannel) Limits() channels.Limits                       { return channels.Limits{} }
func (c logChannel) Reply(context.Context, channels.Message) (channels.Reply, error) {
	return logReply(c), nil
}
func (c logChannel) Send(_ context.Context, _ channels.Message, text string) error {
	c.log.add("send " + text)
	return nil
}

type logReply logChannel

func (r logReply) Start(context.Context) error          { return nil }
func (r logReply) Update(context.Context, string) error { return nil }
func (r logReply) Finish(_ context.Context, text string) error {
	r.log.add("reply " + text)
	return nil
}
func (r logReply) Fail(_ context.Context, reason string) error {
	r.log.add("fail " + reason)
	return nil
}

// nopBusHandler ignores what other replicas publish but the run-ended notices TurnOrder hears.
type nopBusHandler struct{}

func (nopBusHandler) RemoteEvent(agent.Event)        {}
func (nopBusHandler) RemoteCancel(string)            {}
func (nopBusHandler) RemoteUserFrame(string, []byte) {}
func (nopBusHandler) RemoteCloseUser(string)         {}

// orderReplica is one replica of a chat deployment on a shared PostgreSQL database: its store
// handle (its own run owner), bus, turn order, agent and dispatcher.
type orderReplica struct {
	st    *store.PG
	order *TurnOrder
	ag    *agent.Agent
	disp  *Dispatcher
	model *orderModel
	ch    logChannel
}

func newOrderReplica(t *testing.T, url, name string, log *orderLog, poll time.Duration) *orderReplica {
	t.Helper()
	ctx := context.Background()
	st, err := store.OpenPG(ctx, url, store.Options{Owner: name, RunLease: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	bus, err := NewPGBus(PGBusConfig{URL: url, Replica: name})
	require.NoError(t, err)
	order, err := NewTurnOrder(TurnOrderConfig{Store: st, Owner: name, Bus: bus, Poll: poll})
	require.NoError(t, err)
	model := &orderModel{log: log, held: make(chan string, 4), release: make(chan struct{})}
	ag, err := agent.New(agent.Config{Store: st, Model: model, Order: order})
	require.NoError(t, err)
	ag.Subscribe(order.AgentEvent)
	disp, err := NewDispatcher(DispatcherConfig{Store: st, Agent: ag, TurnDone: order.RunEnded, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	bctx, cancel := context.WithCancel(ctx)
	busDone := make(chan struct{})
	go func() { defer close(busDone); _ = bus.Run(bctx, nopBusHandler{}) }()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer ccancel()
		_ = ag.Close(cctx)
		_ = disp.Close(cctx)
		cancel()
		<-busDone
		bus.Close()
	})
	// Listening before the test publishes anything.
	deadline := time.Now().Add(30 * time.Second)
	for !bus.Ready() {
		require.True(t, time.Now().Before(deadline), "bus of %s never listened", name)
		time.Sleep(10 * time.Millisecond)
	}
	return &orderReplica{st: st, order: order, ag: ag, disp: disp, model: model, ch: logChannel{log: log}}
}

// handle delivers a chat message to the replica's dispatcher as its channel would, and fails the
// test if that does not return (the platform's ack waits for it).
func (r *orderReplica) handle(t *testing.T, id, text string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.disp.Handler(r.ch).HandleMessage(context.Background(), channels.Message{Channel: "wechat", ID: id,
			ConversationID: "openid-1", SenderID: "openid-1", Text: text})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("handling message %s did not return: the platform's ack would wait", id)
	}
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitHeldQ(t *testing.T, m *orderModel) string {
	t.Helper()
	select {
	case q := <-m.held:
		return q
	case <-time.After(60 * time.Second):
		t.Fatal("the model never received the held question")
		return ""
	}
}

// Two replicas on one PostgreSQL database take the messages of one chat: message 1 runs on A (the
// model holds it), message 2 reaches B. B acks at once and stores the turn, but its run starts only
// when A's answer has been delivered — woken by A's notice over the bus, sent after the delivery
// (polling is set far beyond the test's bounds, so only the notice can release it) — and the
// answers reach the chat in turn order.
func TestTurnOrderAcrossReplicasPG(t *testing.T) {
	url := pgtest.Schema(t)
	log := &orderLog{}
	a := newOrderReplica(t, url, "replica-a", log, time.Hour)
	b := newOrderReplica(t, url, "replica-b", log, time.Hour)

	q1, q2 := holdMark+"第一个问题", "第二个问题"
	a.handle(t, "m1", q1)
	waitHeldQ(t, a.model)
	b.handle(t, "m2", q2)
	// B's worker reached the wait: without it, its model would already be answering.
	waitCond(t, "B's turn to wait", func() bool { return b.order.Waiting() == 1 })
	assert.Equal(t, -1, log.index("start "+q2), "message 2 does not run while message 1 runs on A: %v", log.snapshot())
	ctx := context.Background()
	sid, err := a.st.ConversationSession(ctx, "wechat:openid-1")
	require.NoError(t, err)
	runs, err := a.st.ListRuns(ctx, sid)
	require.NoError(t, err)
	require.Len(t, runs, 2, "both turns stored")
	assert.Equal(t, []string{"replica-a", "replica-b"}, []string{runs[0].LeaseOwner, runs[1].LeaseOwner})
	assert.Equal(t, store.PhaseRunning, runs[1].Phase, "the waiting turn is RUNNING in the store, leased by B")

	close(a.model.release)
	waitCond(t, "both answers", func() bool { return log.index("reply 答复："+q2) >= 0 })
	assert.Equal(t, []string{"start " + q1, "end " + q1, "reply 答复：" + q1, "start " + q2, "end " + q2, "reply 答复：" + q2},
		log.snapshot(), "message 2 ran after message 1 ended, and the answers came in order")
	assert.Zero(t, b.order.Waiting())
	runs, err = a.st.ListRuns(ctx, sid)
	require.NoError(t, err)
	for _, r := range runs {
		assert.Equal(t, store.PhaseCompleted, r.Phase)
	}
	assert.False(t, runs[1].StartedAt.Before(runs[0].StartedAt))
}

// A turn waiting for a run whose replica died is released when a lease reaper fails that run
// "interrupted": here B's own reaper, which tells the chat and then B's waiting turn directly
// (polling is set beyond the test's bounds, so the notice comes first). A third replica (C)
// waits too and has only its poll to learn it, since the dead run's reaper is B: a lost or absent
// notice delays a chat, never stalls it.
func TestTurnOrderReleasedByReaperPG(t *testing.T) {
	url := pgtest.Schema(t)
	log := &orderLog{}
	b := newOrderReplica(t, url, "replica-b", log, time.Hour)
	ctx := context.Background()

	// Replica "dead" took message 1 of the chat and died: its run is RUNNING with a lease that
	// runs out in a moment.
	dead, err := store.OpenPG(ctx, url, store.Options{Owner: "dead", RunLease: 200 * time.Millisecond})
	require.NoError(t, err)
	defer dead.Close()
	acc, err := dead.AcceptInbound(ctx, store.Inbound{SeenKey: "msg:wechat:m1", SeenTTL: time.Hour, Conversation: "wechat:openid-1",
		Create: &store.Session{UserID: "wechat:openid-1", Channel: "wechat"},
		Turn:   &store.InboundTurn{Channel: "wechat", Text: "第一个问题", Origin: originOf(channels.Message{Channel: "wechat", ID: "m1", ConversationID: "openid-1", Ref: "openid-1"})}})
	require.NoError(t, err)

	b.handle(t, "m2", "第二个问题")
	waitCond(t, "B's turn to wait", func() bool { return b.order.Waiting() == 1 })
	assert.Equal(t, -1, log.index("start 第二个问题"))

	// B's reaper with a clock 5 s ahead: the dead run's lease (200 ms) is past its grace at once,
	// while B's own runs, renewed 10 s ahead, are never near theirs however slow the machine.
	ahead := func() time.Time { return time.Now().Add(5 * time.Second) }
	leases, err := NewLeases(LeasesConfig{Store: b.st, Owner: "replica-b", Lease: 10 * time.Second, Now: ahead, Interrupted: func(r store.Run) {
		b.disp.RunInterrupted(r, []channels.Channel{b.ch}) // tells the chat, then TurnDone wakes B's turn
	}})
	require.NoError(t, err)
	waitCond(t, "the dead replica's run to be reaped", func() bool {
		leases.Round(ctx)
		r, err := b.st.GetRun(ctx, acc.Run.ID)
		return err == nil && r.Phase == store.PhaseFailed
	})
	waitCond(t, "message 2's answer", func() bool { return log.index("reply 答复：第二个问题") >= 0 })
	got := log.snapshot()
	assert.Contains(t, got, "send "+noticeInterrupted, "the chat is told that message 1's answer stopped")
	assert.Less(t, log.index("send "+noticeInterrupted), log.index("reply 答复：第二个问题"), "in turn order: %v", got)

	// Polling alone: C waits for a run of "dead" that B reaps; C hears nothing over the bus about it
	// (B's reaper tells only B here) and finds out by asking again.
	c := newOrderReplica(t, url, "replica-c", log, 50*time.Millisecond)
	acc3, err := dead.AcceptInbound(ctx, store.Inbound{SeenKey: "msg:wechat:m3", SeenTTL: time.Hour, Conversation: "wechat:openid-1",
		Turn: &store.InboundTurn{Channel: "wechat", Text: "第三个问题"}})
	require.NoError(t, err)
	c.handle(t, "m4", "第四个问题")
	waitCond(t, "C's turn to wait", func() bool { return c.order.Waiting() == 1 })
	leases2, err := NewLeases(LeasesConfig{Store: b.st, Owner: "replica-b", Lease: 10 * time.Second, Now: ahead})
	require.NoError(t, err)
	waitCond(t, "message 3's run to be reaped", func() bool {
		leases2.Round(ctx)
		r, err := b.st.GetRun(ctx, acc3.Run.ID)
		return err == nil && r.Phase == store.PhaseFailed
	})
	waitCond(t, "message 4's answer", func() bool { return log.index("reply 答复：第四个问题") >= 0 })
}

// An earlier turn that is cancelled, or fails, releases the next turn of its session on another
// replica just as one that completes: after its ending reached the chat.
func TestTurnOrderReleasedByCancelledAndFailedRunsPG(t *testing.T) {
	url := pgtest.Schema(t)
	log := &orderLog{}
	a := newOrderReplica(t, url, "replica-a", log, time.Hour)
	b := newOrderReplica(t, url, "replica-b", log, time.Hour)
	ctx := context.Background()
	// afterDelivery: the earlier turn's ending (an answer or a failure) reached the chat before the
	// later turn's model started.
	afterDelivery := func(earlier, later string) {
		t.Helper()
		got := log.snapshot()
		end, delivered, start := log.index("end "+earlier), -1, log.index("start "+later)
		require.GreaterOrEqual(t, end, 0, "%v", got)
		for i := end + 1; i < len(got); i++ {
			if strings.HasPrefix(got[i], "fail ") || strings.HasPrefix(got[i], "reply ") {
				delivered = i
				break
			}
		}
		require.GreaterOrEqual(t, delivered, 0, "%v", got)
		assert.Less(t, delivered, start, "%v", got)
	}

	q1, q2 := holdMark+"一", "二"
	a.handle(t, "m1", q1)
	waitHeldQ(t, a.model)
	b.handle(t, "m2", q2)
	waitCond(t, "B's turn to wait", func() bool { return b.order.Waiting() == 1 })
	sid, err := a.st.ConversationSession(ctx, "wechat:openid-1")
	require.NoError(t, err)
	require.True(t, a.ag.Cancel(sid), "message 1 runs on A")
	waitCond(t, "message 2's answer", func() bool { return log.index("reply 答复："+q2) >= 0 })
	afterDelivery(q1, q2)

	q3, q4 := holdMark+failMark+"三", "四"
	a.handle(t, "m3", q3)
	waitHeldQ(t, a.model)
	b.handle(t, "m4", q4)
	waitCond(t, "B's turn to wait", func() bool { return b.order.Waiting() == 1 })
	assert.Equal(t, -1, log.index("start "+q4))
	close(a.model.release)
	waitCond(t, "message 4's answer", func() bool { return log.index("reply 答复："+q4) >= 0 })
	afterDelivery(q3, q4)

	runs, err := a.st.ListRuns(ctx, sid)
	require.NoError(t, err)
	var phases []store.Phase
	for _, r := range runs {
		phases = append(phases, r.Phase)
	}
	assert.Equal(t, []store.Phase{store.PhaseCancelled, store.PhaseCompleted, store.PhaseFailed, store.PhaseCompleted}, phases)
}

// fakeOrderBus records the run-ended notices a TurnOrder publishes.
type fakeOrderBus struct {
	mu    sync.Mutex
	ended []string
}

func (b *fakeOrderBus) PublishRunEnded(sid string) {
	b.mu.Lock()
	b.ended = append(b.ended, sid)
	b.mu.Unlock()
}
func (b *fakeOrderBus) OnRunEnded(func(string)) {}

// A desktop run's end is announced when the agent reports it; a chat run's only once the
// dispatcher delivered its answer (TurnDone calls RunEnded), not at run.finished.
func TestTurnOrderAnnouncesDesktopRunsAtTheirEnd(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "citegate.db"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	bus := &fakeOrderBus{}
	o, err := NewTurnOrder(TurnOrderConfig{Store: st, Owner: "a", Bus: bus})
	require.NoError(t, err)
	o.AgentEvent(agent.Event{Type: agent.EventRunFinished, SessionID: "s-desk", Channel: "desktop"})
	o.AgentEvent(agent.Event{Type: agent.EventRunFinished, SessionID: "s-chat", Channel: "wechat"})
	o.AgentEvent(agent.Event{Type: agent.EventRunStarted, SessionID: "s-desk2", Channel: "desktop"})
	o.RunEnded("s-chat2")
	assert.Equal(t, []string{"s-desk", "s-chat2"}, bus.ended)
}

package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/store"
)

// memNet is an in-process transport between the buses of several Servers: what one member
// sends, every other member receives, in order — what NOTIFY does between processes, so the
// outbox, the packets and the hub's remote path run exactly as with PostgreSQL.
type memNet struct {
	mu      sync.Mutex
	members []*memMember
}

type memMember struct {
	net *memNet
	in  chan []byte
}

func (n *memNet) join(t *testing.T, name string) *packetBus {
	m := &memMember{net: n, in: make(chan []byte, 1<<14)}
	n.mu.Lock()
	n.members = append(n.members, m)
	n.mu.Unlock()
	b, err := newPacketBus(name, m, nil, nil, nil)
	require.NoError(t, err)
	return b
}

func (m *memMember) send(_ context.Context, packets [][]byte) error {
	m.net.mu.Lock()
	defer m.net.mu.Unlock()
	for _, o := range m.net.members {
		for _, p := range packets {
			o.in <- p // every member, the sender too, as NOTIFY does
		}
	}
	return nil
}

func (m *memMember) listen(ctx context.Context, deliver func([]byte), ready func(bool)) error {
	ready(true)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-m.in:
			deliver(p)
		}
	}
}

// replica is one Server of a multi-replica test: its own agent and bus, the shared store.
type replica struct {
	env *testEnv
	bus *packetBus
}

// newReplicas starts n Servers on one bbolt store (a stand-in for the shared PostgreSQL
// database; the bbolt handle is safe for concurrent use), joined by a memNet bus.
func newReplicas(t *testing.T, n int, model func() *scriptedModel) []*replica {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "citegate.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	net := &memNet{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var out []*replica
	for i := range n {
		bus := net.join(t, "replica-"+string(rune('a'+i)))
		m := model()
		ag, err := agent.New(agent.Config{Store: st, Model: m, Tools: []agent.Tool{fixedSearch{result: func(q string) string {
			return searchResult(q, [3]string{"示例来源", "https://example.com/a", "示例内容：" + q})
		}}}})
		require.NoError(t, err)
		ts := httptest.NewUnstartedServer(nil)
		srv, err := New(Config{Addr: "127.0.0.1:0", PublicURL: "http://" + ts.Listener.Addr().String(), DataDir: dir, Store: st,
			Agent: ag, Bus: bus, Registry: prometheus.NewRegistry(), ChatRatePerMinute: 600})
		require.NoError(t, err)
		ts.Config.Handler = srv.Handler()
		ts.Start()
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.RunBus(ctx) }()
		t.Cleanup(func() {
			srv.Close()
			ts.Close()
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ccancel()
			_ = ag.Close(cctx)
		})
		out = append(out, &replica{env: &testEnv{t: t, st: st, ag: ag, srv: srv, ts: ts, model: m}, bus: bus})
	}
	return out
}

// summary reduces a run's frames to what must agree between replicas: the frame types with the
// deltas joined (the bus may coalesce them), the answer text and the final frames' payloads.
func summary(frames []map[string]any) (kinds []string, text string, finals []map[string]any) {
	for _, f := range frames {
		typ, _ := f["type"].(string)
		if typ == "answer.html" {
			// Progressive renders are coalesced by time on each replica, so their number differs;
			// ws_progressive_test.go checks them.
			continue
		}
		if typ == "answer.delta" {
			text += f["text"].(string)
			if len(kinds) == 0 || kinds[len(kinds)-1] != "answer.delta" {
				kinds = append(kinds, typ)
			}
			continue
		}
		kinds = append(kinds, typ)
		if typ == "answer.final" || typ == "citations" || typ == "run.finished" {
			finals = append(finals, f)
		}
	}
	return kinds, text, finals
}

// A desktop client connected to replica B sees, live and in order, the run its user started on
// replica A: the same frames as a client on A, the final answer rendered from the shared store with
// its verified citations.
func TestBusRunOnOneReplicaStreamsToAnother(t *testing.T) {
	rs := newReplicas(t, 2, func() *scriptedModel {
		return &scriptedModel{answer: func(q string, _ []string) string {
			return "答案：" + q + "，<b>第一点</b>[^1^]。" + strings.Repeat("更多内容。", 300)
		}}
	})
	a, b := rs[0], rs[1]
	u, tok := a.env.user("alice")
	sess := a.env.session(u, "t")
	onA, onB := a.env.mustWS(tok), b.env.mustWS(tok)
	onA.send(map[string]any{"type": "chat.send", "sessionId": sess.ID, "text": "发票抬头"})
	framesA := onA.until("run.finished")
	framesB := onB.until("run.finished")

	kindsA, textA, finalsA := summary(framesA)
	kindsB, textB, finalsB := summary(framesB)
	assert.Equal(t, []string{"run.started", "tool.started", "tool.finished", "answer.delta", "answer.final", "citations", "run.finished"}, kindsA)
	assert.Equal(t, kindsA, kindsB, "the same frames, in the same order")
	assert.Equal(t, textA, textB, "every delta arrives")
	require.Len(t, finalsB, 3)
	for i := range finalsA {
		assert.Equal(t, finalsA[i], finalsB[i], "final frames agree (content, html, citations)")
	}
	assert.Contains(t, finalsB[0]["content"], "[^1^]", "the stored content, markers kept")
	assert.Contains(t, finalsB[1]["html"], "<sup", "the answer renders with its citation")
	assert.Len(t, finalsB[1]["citations"], 1)
	assert.Equal(t, "COMPLETED", finalsB[2]["phase"])
	onB.quiet(200 * time.Millisecond)
}

// chat.cancel sent to replica B stops the run executing on replica A; a cancel with nothing
// running anywhere is still an error.
func TestBusCancelReachesTheOwningReplica(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	rs := newReplicas(t, 2, func() *scriptedModel {
		return &scriptedModel{answer: func(q string, _ []string) string { return "一段很长的回答正在生成中[^1^]" }, hold: hold}
	})
	a, b := rs[0], rs[1]
	u, tok := a.env.user("alice")
	sess := a.env.session(u, "t")
	onA, onB := a.env.mustWS(tok), b.env.mustWS(tok)

	onB.send(map[string]any{"type": "chat.cancel", "sessionId": sess.ID})
	f := onB.next()
	assert.Equal(t, "error", f["type"], "nothing runs yet: %v", f)

	onA.send(map[string]any{"type": "chat.send", "sessionId": sess.ID, "text": "问题"})
	onB.until("answer.delta") // the run is in its answer round on A, held
	onB.send(map[string]any{"type": "chat.cancel", "sessionId": sess.ID})
	last := onB.until("run.finished")
	assert.Equal(t, "CANCELLED", last[len(last)-1]["phase"])
	for _, f := range last {
		assert.NotEqual(t, "error", f["type"], "%v", f)
	}
	lastA := onA.until("run.finished")
	assert.Equal(t, "CANCELLED", lastA[len(lastA)-1]["phase"])
	runs, err := a.env.st.ListRuns(context.Background(), sess.ID)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, store.PhaseCancelled, runs[0].Phase)
}

// fakeChannel records what the dispatcher sends.
type fakeChannel struct {
	mu   sync.Mutex
	sent []string
	to   []channels.Message
	got  chan struct{}
}

func (f *fakeChannel) Name() string                                  { return "wechat" }
func (f *fakeChannel) Start(context.Context, channels.Handler) error { return nil }
func (f *fakeChannel) Limits() channels.Limits                       { return channels.Limits{} }
func (f *fakeChannel) Reply(context.Context, channels.Message) (channels.Reply, error) {
	return nil, nil
}
func (f *fakeChannel) Send(_ context.Context, m channels.Message, text string) error {
	f.mu.Lock()
	f.sent, f.to = append(f.sent, text), append(f.to, m)
	f.mu.Unlock()
	f.got <- struct{}{}
	return nil
}

// A run whose replica stopped renewing its lease is failed by a survivor's reaper, the user's
// desktop clients on every replica see it end, and a chat conversation is told through its channel.
func TestBusReaperEndsRunsOfADeadReplica(t *testing.T) {
	rs := newReplicas(t, 2, func() *scriptedModel { return &scriptedModel{answer: func(string, []string) string { return "x" }} })
	a, b := rs[0], rs[1]
	ctx := context.Background()
	u, tok := a.env.user("alice")
	sess := a.env.session(u, "t")
	onB := b.env.mustWS(tok)
	now := time.Now()
	// Past the 4 s lease's grace of 1 s.
	dead, err := a.env.st.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop", LeaseOwner: "dead", LeaseUntil: now.Add(-2 * time.Second)})
	require.NoError(t, err)
	chatSess, err := a.env.st.CreateSession(ctx, store.Session{UserID: "wechat:o1", Channel: "wechat"})
	require.NoError(t, err)
	origin := originOf(channels.Message{Channel: "wechat", ID: "m1", ConversationID: "o1", Ref: "o1"})
	chatRun, err := a.env.st.CreateRun(ctx, store.Run{SessionID: chatSess.ID, Channel: "wechat", LeaseOwner: "dead", LeaseUntil: now.Add(-2 * time.Second), Origin: origin})
	require.NoError(t, err)
	alive, err := a.env.st.CreateRun(ctx, store.Run{SessionID: chatSess.ID, Channel: "wechat", LeaseOwner: "live", LeaseUntil: now.Add(time.Hour)})
	require.NoError(t, err)

	ch := &fakeChannel{got: make(chan struct{}, 4)}
	disp, err := NewDispatcher(DispatcherConfig{Store: a.env.st, Agent: a.env.ag, Logger: a.env.srv.log})
	require.NoError(t, err)
	defer disp.Close(ctx)
	var told []string
	leases, err := NewLeases(LeasesConfig{Store: a.env.st, Owner: "replica-a", Lease: 4 * time.Second, Interrupted: func(r store.Run) {
		told = append(told, r.ID)
		a.env.srv.RunInterrupted(r)
		disp.RunInterrupted(r, []channels.Channel{ch})
	}})
	require.NoError(t, err)
	leases.Round(ctx)

	assert.ElementsMatch(t, []string{dead.ID, chatRun.ID}, told, "the live replica's run is left alone")
	for _, id := range []string{dead.ID, chatRun.ID} {
		r, err := a.env.st.GetRun(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, store.PhaseFailed, r.Phase)
		assert.Equal(t, store.ErrorInterrupted, r.Error)
	}
	r, err := a.env.st.GetRun(ctx, alive.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseRunning, r.Phase)

	f := onB.until("run.finished")
	last := f[len(f)-1]
	assert.Equal(t, dead.ID, last["runId"], "the desktop client on the other replica sees the run end")
	assert.Equal(t, "FAILED", last["phase"])
	assert.Equal(t, interruptedError, last["error"])

	select {
	case <-ch.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the conversation was not told")
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	assert.Equal(t, []string{noticeInterrupted}, ch.sent)
	assert.Equal(t, "o1", ch.to[0].ConversationID)
	assert.Equal(t, "m1", ch.to[0].ID)
	assert.Equal(t, "o1", ch.to[0].Ref, "the channel's reference is rebuilt")
}

func TestRunOriginRoundTrip(t *testing.T) {
	type ref struct{ MessageID, ChatID string }
	m := channels.Message{Channel: "feishu", ID: "om_1", ConversationID: "oc_1", SenderID: "u", SenderName: "张三", Group: true, Mentioned: true, Text: "not recorded", Ref: ref{"om_1", "oc_1"}}
	raw := originOf(m)
	assert.NotContains(t, string(raw), "not recorded", "the text is the USER message's, not the origin's")
	var o runOrigin
	require.NoError(t, json.Unmarshal(raw, &o))
	got := o.message(&fakeChannel{})
	want := m
	want.Text, want.Ref = "", nil // an object Ref needs the channel's RefDecoder
	assert.Equal(t, want, got)
}

// What a user's other tabs learn outside any run reaches them on every replica: a session created
// by chat.send on A (the sender's clientMsgId with it), renamed through A's API, deleted through
// B's. Another user hears nothing, and after the deletion replica A refuses the deleted session
// like any unknown one (its cached owner is forgotten).
func TestBusUserFramesReachEveryReplica(t *testing.T) {
	rs := newReplicas(t, 2, func() *scriptedModel {
		return &scriptedModel{answer: func(string, []string) string { return "好的[^1^]" }}
	})
	a, b := rs[0], rs[1]
	_, tok := a.env.user("alice")
	_, bobTok := a.env.user("bob")
	onA, onB, bobOnB := a.env.mustWS(tok), b.env.mustWS(tok), b.env.mustWS(bobTok)

	onA.send(map[string]any{"type": "chat.send", "text": "新的问题", "clientMsgId": "m-1"})
	createdB := onB.until("session.created")
	created := createdB[len(createdB)-1]
	assert.Equal(t, "m-1", created["clientMsgId"])
	sid, _ := created["sessionId"].(string)
	require.NotEmpty(t, sid)
	assert.Equal(t, "新的问题", created["session"].(map[string]any)["title"])
	onB.until("run.finished")
	onA.until("run.finished")

	status, _, body := a.env.do("PATCH", "/api/sessions/"+sid, tok, strings.NewReader(`{"title":"改过的标题"}`))
	require.Equal(t, 200, status, body)
	upd := onB.until("session.updated")
	assert.Equal(t, sid, upd[len(upd)-1]["sessionId"])
	assert.Equal(t, "改过的标题", upd[len(upd)-1]["session"].(map[string]any)["title"])
	onA.until("session.updated")

	// Replica A learns the owner of the session first (a client of its own sent into it).
	onA.send(map[string]any{"type": "session.open", "sessionId": sid})
	onA.until("session.history")
	status, _, body = b.env.do("DELETE", "/api/sessions/"+sid, tok, nil)
	require.Equal(t, 200, status, body)
	del := onA.until("session.deleted")
	assert.Equal(t, sid, del[len(del)-1]["sessionId"])
	onB.until("session.deleted")
	onA.send(map[string]any{"type": "chat.send", "sessionId": sid, "text": "还在吗", "clientMsgId": "m-2"})
	f := onA.next()
	assert.Equal(t, "error", f["type"], "%v", f)
	assert.Equal(t, "not_found", f["code"], "%v", f)

	// Bob, on B all along, got none of alice's frames.
	bobOnB.send(map[string]any{"type": "session.open", "sessionId": "no-such-session"})
	bf := bobOnB.next()
	assert.Equal(t, "error", bf["type"], "bob's first frame is the answer to his own request: %v", bf)
}

// manualClock is a clock a test moves by hand.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// With an injected clock: a replica's runs — one executing for many lease periods, one stored and
// queued behind it and not yet started — keep their leases for as long as the replica renews, while
// another replica reaps every round; once the owner stops renewing, the other replica leaves them
// alone for the lease and its grace (a quarter) and fails both in the next round: within 1.45
// leases of the last renewal, 29 s for the default lease.
func TestLeasesKeepLongAndQueuedRunsAlive(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "citegate.db"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	ctx := context.Background()
	const lease = 20 * time.Second
	clk := &manualClock{t: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)}
	sess, err := st.CreateSession(ctx, store.Session{UserID: "feishu:oc_1", Channel: "feishu"})
	require.NoError(t, err)
	long, err := st.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "feishu", LeaseOwner: "a", LeaseUntil: clk.now().Add(lease)})
	require.NoError(t, err)
	queued, err := st.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "feishu", LeaseOwner: "a", LeaseUntil: clk.now().Add(lease)})
	require.NoError(t, err)
	var reaped []string
	newLeases := func(owner string) *Leases {
		l, err := NewLeases(LeasesConfig{Store: st, Owner: owner, Lease: lease, Now: clk.now,
			Interrupted: func(r store.Run) { reaped = append(reaped, owner+":"+r.ID) }})
		require.NoError(t, err)
		return l
	}
	a, b := newLeases("a"), newLeases("b")
	// Ten lease periods of rounds, every lease/5 as Run ticks, the reaping replica's first.
	for range 50 {
		clk.add(leaseRound(lease))
		b.Round(ctx)
		a.Round(ctx)
	}
	assert.Empty(t, reaped, "no run of a renewing replica is reaped")
	for _, id := range []string{long.ID, queued.ID} {
		r, err := st.GetRun(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, store.PhaseRunning, r.Phase)
		assert.Equal(t, clk.now().Add(lease), r.LeaseUntil.UTC(), "renewed to a lease from now")
	}
	// Replica a stops renewing (it died): b fails both once the last renewal's lease and its grace
	// have passed.
	clk.add(lease)
	b.Round(ctx)
	assert.Empty(t, reaped, "exactly one lease after the last renewal the runs are still covered")
	clk.add(leaseGrace(lease))
	b.Round(ctx)
	assert.Empty(t, reaped, "and for the grace period after it")
	clk.add(leaseRound(lease))
	b.Round(ctx)
	assert.ElementsMatch(t, []string{"b:" + long.ID, "b:" + queued.ID}, reaped)
	assert.LessOrEqual(t, lease+leaseGrace(lease)+leaseRound(lease), 30*time.Second, "no run stays RUNNING 30 s after its replica died")
}

// A user whose token changed or who was revoked on one replica loses its open connections on every
// replica; other users' stay.
func TestBusCloseUserReachesEveryReplica(t *testing.T) {
	rs := newReplicas(t, 2, func() *scriptedModel {
		return &scriptedModel{answer: func(string, []string) string { return "好的" }}
	})
	a, b := rs[0], rs[1]
	alice, tok := a.env.user("alice")
	_, bobTok := a.env.user("bob")
	onA, onB, bobOnB := a.env.mustWS(tok), b.env.mustWS(tok), b.env.mustWS(bobTok)
	a.env.srv.closeUserEverywhere(alice.ID)
	for _, w := range []*wsConn{onA, onB} {
		closed := false
		for !closed {
			select {
			case _, ok := <-w.frames:
				closed = !ok
			case <-time.After(30 * time.Second):
				t.Fatal("alice's connection stayed open")
			}
		}
	}
	bobOnB.send(map[string]any{"type": "session.open", "sessionId": "no-such-session"})
	f := bobOnB.next()
	assert.Equal(t, "error", f["type"], "bob's connection still answers: %v", f)
}

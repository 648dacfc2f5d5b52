package gateway

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// manualTimers replaces time.AfterFunc: scheduled functions run only when the test fires them.
type manualTimers struct {
	mu      sync.Mutex
	pending []*manualTimer
	waits   []time.Duration
}

type manualTimer struct {
	f       func()
	stopped bool
}

func (m *manualTimers) after(d time.Duration, f func()) func() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &manualTimer{f: f}
	m.pending = append(m.pending, t)
	m.waits = append(m.waits, d)
	return func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// fire runs every scheduled function that was not stopped; it reports how many ran.
func (m *manualTimers) fire() int {
	m.mu.Lock()
	ts := m.pending
	m.pending = nil
	m.mu.Unlock()
	n := 0
	for _, t := range ts {
		m.mu.Lock()
		stopped := t.stopped
		t.stopped = true
		m.mu.Unlock()
		if !stopped {
			t.f()
			n++
		}
	}
	return n
}

// TestRunFramesPerTurnBounded: a fast model's turn (here 200 chunks of three characters, produced
// faster than the flush gap) reaches a connection as a handful of frames: the first chunk at once,
// the rest joined into one delta that answer.final's arrival flushes. The clock stands still and
// no flush timer fires, so the count is exact whatever the machine's speed; the per-chunk gateway
// this replaced sent 200 delta frames to a connection that keeps up. The deltas still spell out
// exactly the safe text of the final answer, and none comes after answer.final.
func TestRunFramesPerTurnBounded(t *testing.T) {
	e := newEnv(t)
	answer := strings.Repeat("电子发票抬头写错了，可以申请重开。", 36) + "[^1^]"
	e.model.answer = func(string, []string) string { return answer }
	timers := &manualTimers{}
	clock := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	h := e.srv.hub
	h.deltas.now = func() time.Time { return clock }
	h.deltas.after = timers.after
	h.live.after = func(time.Duration, func()) {} // no progressive renders: their count is timing
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "发票抬头错了？", "clientMsgId": "c1"})
	frames := ws.until("run.finished")

	got := types(frames)
	assert.Equal(t, []string{"session.created", "run.started", "tool.started", "tool.finished",
		"answer.delta", "answer.delta", "answer.final", "citations", "run.finished"}, got)
	var text strings.Builder
	final := ""
	for _, f := range frames {
		switch f["type"] {
		case "answer.delta":
			require.Empty(t, final, "no delta after answer.final")
			text.WriteString(f["text"].(string))
		case "answer.final":
			final = f["content"].(string)
		}
	}
	assert.Equal(t, citations.Strip(final), text.String(), "the deltas spell out the safe final text")
	assert.Equal(t, answer, final)
	assert.Len(t, timers.waits, 1, "one flush was scheduled")
	assert.Zero(t, timers.fire(), "answer.final stopped it")
	assert.Zero(t, h.deltas.pending(), "no state is left after run.finished")
}

// TestDeltaJoinerKeepsTextAndOrder: for any chunking, any clock and any timer firing, the joiner
// forwards the run's text byte for byte, in order, never an empty delta, every other event in its
// place after the text before it, and no delta after answer.final.
func TestDeltaJoinerKeepsTextAndOrder(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		clock := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
		timers := &manualTimers{}
		var out []agent.Event
		var mu sync.Mutex
		j := newDeltaJoiner(func(ev agent.Event) { mu.Lock(); out = append(out, ev); mu.Unlock() },
			func() time.Time { return clock }, func() {})
		j.after = timers.after

		var want []agent.Event // the events as emitted, consecutive deltas merged
		emit := func(ev agent.Event) {
			j.event(ev)
			if n := len(want); ev.Type == agent.EventAnswerDelta && n > 0 && want[n-1].Type == agent.EventAnswerDelta {
				want[n-1].Text += ev.Text
				return
			}
			want = append(want, ev)
		}
		ev := func(typ agent.EventType, text string) agent.Event {
			return agent.Event{Type: typ, SessionID: "s", RunID: "r", Text: text}
		}
		emit(ev(agent.EventRunStarted, ""))
		for range 1 + rng.IntN(5) {
			emit(ev(agent.EventToolStarted, ""))
			for range rng.IntN(60) {
				emit(ev(agent.EventAnswerDelta, strings.Repeat("字", rng.IntN(9))+"a"))
				switch rng.IntN(6) {
				case 0:
					clock = clock.Add(time.Duration(rng.IntN(80)) * time.Millisecond)
				case 1:
					timers.fire()
				}
			}
			emit(ev(agent.EventToolFinished, ""))
		}
		for range rng.IntN(300) {
			emit(ev(agent.EventAnswerDelta, "x"))
			if rng.IntN(20) == 0 {
				clock = clock.Add(deltaFlushGap)
			}
		}
		emit(ev(agent.EventAnswerFinal, ""))
		timers.fire() // a timer firing after the final answer sends nothing
		emit(ev(agent.EventRunFinished, ""))
		timers.fire()

		// Merge the forwarded deltas the same way: then both sequences are equal.
		var merged []agent.Event
		for _, f := range out {
			require.False(t, f.Type == agent.EventAnswerDelta && f.Text == "", "seed %d: an empty delta", seed)
			if n := len(merged); f.Type == agent.EventAnswerDelta && n > 0 && merged[n-1].Type == agent.EventAnswerDelta {
				merged[n-1].Text += f.Text
				continue
			}
			merged = append(merged, f)
		}
		require.Equal(t, len(want), len(merged), "seed %d", seed)
		for i := range want {
			require.Equal(t, want[i].Type, merged[i].Type, "seed %d, event %d", seed, i)
			require.Equal(t, want[i].Text, merged[i].Text, "seed %d, event %d", seed, i)
		}
		require.Zero(t, j.pending(), "seed %d", seed)
	}
}

// TestDeltaJoinerPacing: the first delta goes at once; text within the gap waits for the timer
// scheduled at the end of the gap; a pause longer than the gap sends the next delta at once; a
// pending text reaching deltaFlushBytes is sent without waiting.
func TestDeltaJoinerPacing(t *testing.T) {
	clock := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	timers := &manualTimers{}
	var out []string
	j := newDeltaJoiner(func(ev agent.Event) { out = append(out, ev.Text) }, func() time.Time { return clock }, func() {})
	j.after = timers.after
	d := func(s string) {
		j.event(agent.Event{Type: agent.EventAnswerDelta, SessionID: "s", RunID: "r", Text: s})
	}
	d("a")
	assert.Equal(t, []string{"a"}, out, "leading edge")
	clock = clock.Add(10 * time.Millisecond)
	d("b")
	d("c")
	assert.Equal(t, []string{"a"}, out, "within the gap: pending")
	require.Equal(t, []time.Duration{deltaFlushGap - 10*time.Millisecond}, timers.waits, "one flush, at the end of the gap")
	clock = clock.Add(30 * time.Millisecond)
	assert.Equal(t, 1, timers.fire())
	assert.Equal(t, []string{"a", "bc"}, out)

	clock = clock.Add(2 * deltaFlushGap)
	d("d")
	assert.Equal(t, []string{"a", "bc", "d"}, out, "after a pause: at once")
	d(strings.Repeat("e", deltaFlushBytes))
	assert.Equal(t, 4, len(out), "a full pending text goes without waiting")
	assert.Zero(t, timers.fire(), "its timer was stopped")

	j.event(agent.Event{Type: agent.EventRunFinished, SessionID: "s", RunID: "r"})
	assert.Zero(t, j.pending())
}

// TestDeltasOfTwoClientsShareOneEncoding: the hub encodes a delta once, whatever the number of the
// owner's connections.
func TestDeltasOfTwoClientsShareOneEncoding(t *testing.T) {
	e := newEnv(t)
	h := e.srv.hub
	u := store.User{ID: "u1"}
	a, b := newClient(e.srv, u, "zh"), newClient(e.srv, u, "en")
	require.NoError(t, h.register(a))
	require.NoError(t, h.register(b))
	t.Cleanup(func() { h.unregister(a); h.unregister(b) })
	h.owners.set("s", u.ID)
	h.live.after = func(time.Duration, func()) {}
	h.onEvent(agent.Event{Type: agent.EventAnswerDelta, SessionID: "s", RunID: "r", Text: "你好"})
	a.mu.Lock()
	b.mu.Lock()
	defer a.mu.Unlock()
	defer b.mu.Unlock()
	require.Len(t, a.queue, 1)
	require.Len(t, b.queue, 1)
	assert.JSONEq(t, `{"type":"answer.delta","sessionId":"s","runId":"r","text":"你好"}`, string(a.queue[0].data))
	assert.Same(t, &a.queue[0].data[0], &b.queue[0].data[0], "one encoding for both connections")
}

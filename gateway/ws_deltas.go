package gateway

import (
	"sync"
	"time"

	"github.com/citegate/citegate/agent"
)

// Delta flushing (issue 8). A model streams its answer in chunks of a few characters; sent one
// frame per chunk, a turn of the offline model was hundreds of frames, each encoded, queued and
// written once per connection: more than half of the server's CPU. The hub therefore joins a run's
// answer.delta text before it is routed or published to other replicas:
//
//   - the first delta of a run, and the first after a pause of at least deltaFlushGap, go out at
//     once (leading edge), so the first words of an answer are not delayed;
//   - later text of the run joins the pending text until deltaFlushGap has passed since the run's
//     last delta frame (a timer flushes it), or the pending text reaches deltaFlushBytes;
//   - any other event of the run (tool.started, answer.final, run.finished …) first flushes the
//     pending text, so the run's frames keep the agent's order and no delta follows answer.final.
//
// A fast offline-model turn thus streams as one or two delta frames, while a real model producing
// a few dozen chunks a second still streams at up to 1/deltaFlushGap frames a second. The desktop
// shows answer.html (at most one per 100 ms, ws_progressive.go), so the gap is below what a reader
// can see. Joined text is the concatenation of pieces that are each marker-free and show only
// allowed URLs (the agent's Stripper and LinkFilter output), so it is exactly as safe; the
// concatenation of a run's delta frames is the concatenation of its events' text, byte for byte.
const (
	deltaFlushGap   = 40 * time.Millisecond
	deltaFlushBytes = 16 << 10
)

// deltaJoiner joins the answer.delta events of each run (see above) and hands every event, joined
// or not, to out in the run's order.
type deltaJoiner struct {
	// out forwards one event (publish to the bus, route to the clients). It is called with the
	// run's lock held, from the run's goroutine or a flush timer, and must not block.
	out func(ev agent.Event)
	// now paces the flushes (the server's clock); after schedules a flush (time.AfterFunc). Tests
	// substitute both.
	now   func() time.Time
	after func(d time.Duration, f func()) (stop func() bool)
	// recover guards the timer goroutine.
	recover func()
	// gap is deltaFlushGap; a benchmark sets 0 to route every chunk as it comes (the baseline).
	gap time.Duration

	mu   sync.Mutex
	runs map[string]*runDeltas
}

// runDeltas is one run's pending answer text. mu orders the run's forwarded events: everything
// the joiner forwards for the run is forwarded under it.
type runDeltas struct {
	mu    sync.Mutex
	ended bool
	ev    agent.Event // the first pending piece (session, run, channel, and its time: the frame's age)
	text  []byte      // the pending text, pieces in order
	last  time.Time   // when the run's last delta frame was forwarded; zero: none yet
	stop  func() bool // the scheduled flush, if any
	gen   int         // identifies the scheduled flush, so a late timer of an earlier one does nothing
}

func newDeltaJoiner(out func(agent.Event), now func() time.Time, recover func()) *deltaJoiner {
	return &deltaJoiner{
		out: out, now: now, recover: recover, gap: deltaFlushGap,
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop },
		runs:  make(map[string]*runDeltas),
	}
}

// event takes one event of a local run.
func (j *deltaJoiner) event(ev agent.Event) {
	if ev.RunID == "" {
		j.out(ev)
		return
	}
	if ev.Type == agent.EventAnswerDelta {
		j.delta(ev)
		return
	}
	j.mu.Lock()
	r := j.runs[ev.RunID]
	if r != nil && ev.Type == agent.EventRunFinished {
		delete(j.runs, ev.RunID)
	}
	j.mu.Unlock()
	if r == nil {
		j.out(ev)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	j.flushLocked(r)
	if ev.Type == agent.EventRunFinished {
		r.ended = true
	}
	j.out(ev)
}

func (j *deltaJoiner) delta(ev agent.Event) {
	if ev.Text == "" {
		return
	}
	j.mu.Lock()
	r := j.runs[ev.RunID]
	if r == nil {
		r = &runDeltas{}
		j.runs[ev.RunID] = r
	}
	j.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := j.now()
	due := r.last.IsZero() || now.Sub(r.last) >= j.gap
	if len(r.text) == 0 {
		if due {
			// Leading edge: nothing pending and no frame within the gap.
			r.last = now
			j.out(ev)
			return
		}
		r.ev = ev
	}
	r.text = append(r.text, ev.Text...)
	if due || len(r.text) >= deltaFlushBytes {
		// due with text pending: the flush timer is late (a busy machine); flush now.
		j.flushLocked(r)
		return
	}
	if r.stop == nil {
		r.gen++
		gen := r.gen
		r.stop = j.after(j.gap-now.Sub(r.last), func() { j.timerFlush(r, gen) })
	}
}

// timerFlush is a scheduled flush.
func (j *deltaJoiner) timerFlush(r *runDeltas, gen int) {
	defer j.recover()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen || r.ended {
		return
	}
	r.stop = nil
	j.flushLocked(r)
}

// flushLocked forwards the pending text as one answer.delta; r.mu is held.
func (j *deltaJoiner) flushLocked(r *runDeltas) {
	if r.stop != nil {
		r.stop()
		r.stop = nil
		r.gen++
	}
	if len(r.text) == 0 {
		return
	}
	ev := r.ev
	ev.Text = string(r.text)
	r.text = r.text[:0]
	r.ev = agent.Event{}
	r.last = j.now()
	j.out(ev)
}

// pending reports how many runs have state (tests: nothing leaks past run.finished).
func (j *deltaJoiner) pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.runs)
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/citations/markdown"
	"github.com/citegate/citegate/store"
)

const (
	// lookupWait bounds one store read made to route an event (in a lane, never in a run).
	lookupWait = 2 * time.Second
	// maxLaneEvents bounds the events held behind one session's store lookup; a lookup slower
	// than a whole answer's worth of events loses the excess rather than growing without bound.
	maxLaneEvents = 8192
)

// onEvent is the agent subscriber. It runs in the run's goroutine and must not block, so it never
// reads the store: an event whose routing needs the store (a session whose owner is not cached, a
// citations event whose answer this hub did not see) goes to the session's lane, where a goroutine
// of its own does the read and routes the lane's events in order.
func (h *hub) onEvent(ev agent.Event) {
	defer h.s.recoverGo("websocket event routing")
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	h.runs.track(ev)
	h.deltas.event(ev)
}

// forward publishes a local run's event, its answer.delta text joined (ws_deltas.go), to the
// other replicas and routes it to this replica's clients.
func (h *hub) forward(ev agent.Event) {
	h.s.bus.Publish(ev)
	h.routeEvent(ev, true)
}

// onRemote routes an event of a run executing on another replica (bus.go). The run's metrics are
// that replica's, so the tracker does not see it.
func (h *hub) onRemote(ev agent.Event) {
	defer h.s.recoverGo("websocket remote event routing")
	h.routeEvent(ev, false)
}

// routeEvent sends ev to its session owner's clients, through the session's lane when routing
// needs the store. local tells an event of this replica's agent from one of another replica.
func (h *hub) routeEvent(ev agent.Event, local bool) {
	// Before the final answer is routed (the lanes run later), so no streaming render follows it;
	// a run on another replica streams formatted to this replica's clients too.
	h.live.observe(ev)
	if !h.anyClients() {
		return
	}
	owner, known := h.owners.get(ev.SessionID)
	// The final answer's HTML follows the link rule recorded with the stored answer
	// (metadata.links). The local agent's final events carry the committed record's metadata; any
	// other final event takes the lane's store read.
	var rec answerRecord
	needRecord := isFinal(ev)
	if needRecord && local {
		rec, needRecord = h.localAnswer(ev)
		needRecord = !needRecord
	}
	if h.lanes.take(ev, !known || needRecord) {
		return
	}
	h.route(ev, owner, rec)
}

// localAnswer is lookupAnswer for a final event of the local agent, from the metadata it carries
// (the committed record's) instead of a store read. ok is false when it cannot be built that way
// (a citations event whose answer.final the tracker did not see).
func (h *hub) localAnswer(ev agent.Event) (_ answerRecord, ok bool) {
	content := ev.Content
	if ev.Type == agent.EventCitations {
		if content, ok = h.runs.finalContent(ev); !ok {
			return answerRecord{}, false
		}
	}
	cits := ev.Citations
	if ev.Type == agent.EventAnswerFinal || cits == nil {
		cits = citations.FromMetadata(ev.Metadata)
	}
	return answerRecord{content: content, allowed: linkAllowList(ev.Metadata, cits), cits: cits}, true
}

// isFinal reports whether ev carries the final answer's HTML.
func isFinal(ev agent.Event) bool {
	return ev.Type == agent.EventAnswerFinal || ev.Type == agent.EventCitations
}

// answerRecord is what rendering a final answer needs beyond the event: the answer's content (a
// citations event does not carry it) and the URLs its link rule allows.
type answerRecord struct {
	content string
	allowed []string
	// cits are the stored citations, for a citations event that arrived without them (from
	// another replica, which sends them by reference).
	cits []citations.Citation
}

// lanes hold, per session, the events waiting behind a store read. While a session has a lane,
// every later event of the session joins it, so the session's frames keep their order.
type lanes struct {
	h  *hub
	mu sync.Mutex
	m  map[string][]agent.Event
}

func newLanes(h *hub) *lanes { return &lanes{h: h, m: make(map[string][]agent.Event)} }

// take queues ev in its session's lane when the session has one, or opens one when needStore; it
// reports whether ev was taken.
func (l *lanes) take(ev agent.Event, needStore bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	q, busy := l.m[ev.SessionID]
	switch {
	case busy:
		if len(q) >= maxLaneEvents {
			l.h.s.log.Warn("websocket event dropped: the store lookup for its session is too slow", "session", ev.SessionID, "type", ev.Type)
			return true
		}
		l.m[ev.SessionID] = append(q, ev)
		return true
	case needStore:
		l.m[ev.SessionID] = []agent.Event{ev}
		go l.drain(ev.SessionID)
		return true
	}
	return false
}

// drain routes the session's lane until it is empty, then closes it.
func (l *lanes) drain(sessionID string) {
	defer l.h.s.recoverGo("websocket event lane")
	for {
		l.mu.Lock()
		evs := l.m[sessionID]
		if len(evs) == 0 {
			delete(l.m, sessionID)
			l.mu.Unlock()
			return
		}
		l.m[sessionID] = nil // still open: later events join it
		l.mu.Unlock()
		for _, ev := range evs {
			owner := l.h.lookupOwner(sessionID)
			if owner == "" {
				continue
			}
			var rec answerRecord
			if isFinal(ev) {
				rec = l.h.lookupAnswer(ev)
			}
			l.h.route(ev, owner, rec)
		}
	}
}

// lookupOwner resolves a session's user from the store, caching the answer. Unknown sessions
// resolve to "" (cached too: channel sessions have no desktop owner and stay unknown).
func (h *hub) lookupOwner(sessionID string) string {
	if u, ok := h.owners.get(sessionID); ok {
		return u
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupWait)
	defer cancel()
	sess, err := h.st.GetSession(ctx, sessionID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			h.s.storeErr("get_session", err)
			return "" // not cached: the next event tries again
		}
		h.owners.set(sessionID, "")
		return ""
	}
	h.owners.set(sessionID, sess.UserID)
	return sess.UserID
}

// lookupAnswer reads the stored answer a final event belongs to: its content and its link rule.
// When the read fails, the content comes from the run's own answer.final if this hub saw it, and
// the rule allows the citations' URLs only (DESIGN §4: a message without metadata.links allows no
// other URL), so a failure can hide a verified link but never show an unverified one.
func (h *hub) lookupAnswer(ev agent.Event) answerRecord {
	ctx, cancel := context.WithTimeout(context.Background(), lookupWait)
	defer cancel()
	m, err := h.st.GetMessage(ctx, ev.MessageID)
	if err != nil {
		h.s.storeErr("get_message", err)
		content := ev.Content
		if ev.Type == agent.EventCitations {
			content, _ = h.runs.finalContent(ev)
		}
		return answerRecord{content: content, allowed: linkAllowList(nil, ev.Citations)}
	}
	cits := ev.Citations
	if ev.Type == agent.EventAnswerFinal || cits == nil {
		// The record may already hold the citations (one transaction with the answer); the
		// citations event re-renders with them either way.
		cits = citations.FromMetadata(m.Metadata)
	}
	return answerRecord{content: m.Content, allowed: linkAllowList(m.Metadata, cits), cits: cits}
}

// route encodes ev for the owner's clients and queues it on each; rec is the stored answer for
// answer.final and citations events.
func (h *hub) route(ev agent.Event, owner string, rec answerRecord) {
	if owner == "" {
		return
	}
	cs := h.clientsOf(owner)
	if len(cs) == 0 {
		return
	}
	f := &wsFrame{Type: string(ev.Type), SessionID: ev.SessionID, RunID: ev.RunID}
	switch ev.Type {
	case agent.EventRunStarted:
		f.UserMessageID, f.Model = ev.UserMessageID, ev.Model
	case agent.EventToolStarted:
		f.CallID, f.Tool, f.Arguments = ev.CallID, ev.Tool, ev.Arguments
	case agent.EventToolFinished:
		ok := ev.OK
		f.CallID, f.Tool, f.OK = ev.CallID, ev.Tool, &ok
	case agent.EventAnswerDelta:
		// Encoded once for all the owner's connections; a connection whose previous delta of the
		// run is still queued joins the text into it instead (ws_client.go).
		d := &pendingDelta{sessionID: ev.SessionID, runID: ev.RunID, text: ev.Text, ats: []time.Time{ev.At}}
		data, err := d.encode()
		if err != nil {
			h.s.log.Error("encode websocket frame", "type", "answer.delta", "err", err)
			return
		}
		woke := false
		for _, c := range cs {
			if queued, joined := c.enqueueDelta(d, data); queued && !joined {
				woke = true
			}
		}
		if woke {
			// The send just made a connection's writer runnable; yield so it gets the CPU before
			// this run goroutine goes on with CPU-heavy work (rendering, persistence). Without this
			// the delta waits for the next preemption on a busy machine. Text that joined a waiting
			// frame does not yield again: its writer is runnable already.
			runtime.Gosched()
		}
		return
	case agent.EventAnswerFinal:
		final := ev.Content
		if final == "" {
			final = rec.content // an event from another replica: the content is the stored one
		}
		f.MessageID, f.Content = ev.MessageID, &final
		h.perLang(cs, f, func(lang string) string {
			return h.s.renderAnswer(final, nil, rec.allowed, markdown.Options{Lang: lang, Anchor: anchorFor(ev.MessageID), MessageID: ev.MessageID})
		})
		return
	case agent.EventCitations:
		cits := ev.Citations
		if cits == nil {
			cits = rec.cits
		}
		f.MessageID, f.Citations = ev.MessageID, cits
		h.perLang(cs, f, func(lang string) string {
			return h.s.renderAnswer(rec.content, cits, rec.allowed, markdown.Options{Lang: lang, Anchor: anchorFor(ev.MessageID), MessageID: ev.MessageID})
		})
		return
	case agent.EventRunFinished:
		f.Phase, f.Error = ev.Phase, ev.Error
	default:
		return // an event type this gateway does not know is not forwarded
	}
	data, err := json.Marshal(f)
	if err != nil {
		return
	}
	for _, c := range cs {
		c.enqueue(outFrame{data: data})
	}
}

// perLang renders html once per language among the clients and sends each its version.
func (h *hub) perLang(cs []*client, f *wsFrame, render func(lang string) string) {
	byLang := map[string][]byte{}
	for _, c := range cs {
		data, ok := byLang[c.lang]
		if !ok {
			html := render(c.lang)
			g := *f
			g.HTML = &html
			var err error
			if data, err = json.Marshal(&g); err != nil {
				return
			}
			byLang[c.lang] = data
		}
		c.enqueue(outFrame{data: data})
	}
}

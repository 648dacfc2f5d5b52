package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// Endings of a reply that did not complete.
const (
	endStopped    = "（回答已停止）"
	endRestarting = "（已停止：服务正在重启，请稍后重新提问）"
	endEmpty      = "（没有生成回答）"
	failPrefix    = "抱歉，这次回答失败了："
)

// pump turns one run's events into calls on one channels.Reply. Events arrive on the agent's run
// goroutine through push, which never blocks; run consumes them in the reply job's goroutine, makes
// every byte safe (outbound.go), and paces Reply.Update to the channel's limit by coalescing deltas
// (each update carries the full text so far).
type pump struct {
	d   *Dispatcher
	ch  channels.Channel
	msg channels.Message
	log *slog.Logger

	mu     sync.Mutex
	queue  []agent.Event
	notify chan struct{}

	// links is the run's link allow set (DESIGN §4): the URLs of the run's USER message and of its
	// tool results so far, the agent's immutable snapshot from the last run.started or
	// tool.finished event (agent.Event.Links), so no tool result is read again here. URLs of the
	// user's earlier messages are not in it, so the stream may hide one the agent's own rule allowed;
	// the final text adds the record's metadata.links.allowed and shows it (finalAllow). A pump
	// follows only runs of this replica's agent (the dispatcher submits them); a run whose replica
	// died gets a notice instead (bus_interrupted.go), so there is no run whose set must be read
	// back from the store.
	links *citations.LinkSnapshot
	model string
}

func newPump(d *Dispatcher, ch channels.Channel, m channels.Message, log *slog.Logger) *pump {
	return &pump{d: d, ch: ch, msg: m, log: log, notify: make(chan struct{}, 1)}
}

// push is the run's Sink.
func (p *pump) push(e agent.Event) {
	p.mu.Lock()
	p.queue = append(p.queue, e)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *pump) take() []agent.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queue
	p.queue = nil
	return q
}

// allows is the allow-func of the run's links.
func (p *pump) allows(u string) bool { return p.links.Allows(u) }

// setLinks takes the snapshot an event carries (none: the set did not change).
func (p *pump) setLinks(e agent.Event) {
	if e.Links != nil {
		p.links = e.Links
	}
}

func (p *pump) run(ctx context.Context, h *agent.RunHandle) {
	var (
		reply     channels.Reply
		started   bool
		stream    = newSafeStream(p.allows)
		text      strings.Builder // safe text so far
		sent      int             // len of text at the last Update
		lastSent  time.Time
		final     agent.Event
		haveFinal bool
	)
	rate := p.ch.Limits().UpdatesPerSecond
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()

	start := func() {
		if started {
			return
		}
		started = true
		r, err := p.ch.Reply(ctx, p.msg)
		if err != nil {
			p.log.Error("open reply failed", "err", err)
			return
		}
		reply = r
		if err := reply.Start(ctx); err != nil {
			p.log.Warn("reply start failed", "err", err)
		}
	}
	update := func() {
		if reply == nil || interval == 0 || text.Len() == sent {
			return
		}
		if wait := interval - time.Since(lastSent); wait > 0 {
			timer.Reset(wait)
			return
		}
		if err := reply.Update(ctx, text.String()); err != nil {
			p.log.Warn("reply update failed", "err", err)
		}
		sent, lastSent = text.Len(), time.Now()
	}

	runDone := h.Done()
	for {
		over := false
		select {
		case <-p.notify:
		case <-timer.C:
			update()
			continue
		case <-runDone:
			// The run is over: what is queued now is all there will be (run.finished is the last
			// event, emitted before Done closes).
			over = true
		case <-ctx.Done():
			return
		}
		events := p.take()
		if over && (len(events) == 0 || events[len(events)-1].Type != agent.EventRunFinished) {
			// Defensive: never wait forever on a run that ended without its final event.
			o := h.Outcome()
			events = append(events, agent.Event{Type: agent.EventRunFinished, SessionID: h.SessionID, Phase: o.Phase, Error: o.Error})
		}
		for _, e := range events {
			switch e.Type {
			case agent.EventRunStarted:
				p.model = e.Model
				p.setLinks(e)
				start()
			case agent.EventToolFinished:
				p.setLinks(e)
			case agent.EventAnswerDelta:
				start()
				text.WriteString(stream.Push(e.Text))
				update()
			case agent.EventAnswerFinal:
				final, haveFinal = e, true
			case agent.EventRunFinished:
				start()
				text.WriteString(stream.Flush())
				p.finish(ctx, reply, e, final, haveFinal, text.String(), stream.Hidden())
				return
			}
		}
	}
}

// finish sends the terminal text: the safe final content (+ sources footer) for COMPLETED runs,
// the streamed text with an ending for CANCELLED ones (stopped, or the server restarting), the
// agent's plain reason for FAILED ones.
func (p *pump) finish(ctx context.Context, reply channels.Reply, done, final agent.Event, haveFinal bool, streamed string, streamHidden int) {
	var text string
	var err error
	hidden := streamHidden
	switch done.Phase {
	case store.PhaseCompleted:
		text = streamed
		if haveFinal {
			stored, ok := p.finalMessage(ctx, final.MessageID)
			text, hidden = safeFinal(final.Content, p.finalAllow(stored, ok))
			if p.d.cfg.SourcesFooter && ok {
				text += footer(stored)
			}
		}
		if strings.TrimSpace(text) == "" {
			text = endEmpty
		}
		if reply != nil {
			err = reply.Finish(ctx, text)
		}
	case store.PhaseCancelled:
		text = strings.TrimSpace(streamed)
		if text != "" {
			text += "\n\n"
		}
		if p.d.stopping.Load() {
			text += endRestarting
		} else {
			text += endStopped
		}
		if reply != nil {
			err = reply.Finish(ctx, text)
		}
	default:
		// The agent's reason is already plain words (its texts); it still passes the rule.
		text, _ = safeFinal(failPrefix+done.Error, nil)
		if reply != nil {
			err = reply.Fail(ctx, text)
		}
	}
	if hidden > 0 {
		model := p.model
		if model == "" {
			model = "unknown"
		}
		p.d.linksHidden.WithLabelValues(model, p.msg.Channel).Add(float64(hidden))
	}
	switch {
	case err != nil && channels.IsPermanent(err):
		p.log.Warn("reply could not be delivered; the platform refuses further messages for now", "err", err)
	case reply == nil || err != nil:
		if err != nil {
			p.log.Warn("reply finish failed; sending plain text instead", "err", err)
		}
		p.d.sendSafe(ctx, p.ch, p.msg, text)
	}
}

// finalMessage reads the stored final answer (its citations and link decision).
func (p *pump) finalMessage(ctx context.Context, id uint64) (store.Message, bool) {
	if id == 0 {
		return store.Message{}, false
	}
	m, err := p.d.cfg.Store.GetMessage(ctx, id)
	if err != nil {
		p.log.Warn("final message lookup failed", "err", err)
		return store.Message{}, false
	}
	return m, true
}

// finalAllow is the allow-func of the final text: the run's links, the verified citations' URLs
// and the URLs the stored record allows (metadata.links.allowed).
func (p *pump) finalAllow(m store.Message, ok bool) func(string) bool {
	if !ok {
		return p.allows
	}
	var urls []string
	for _, c := range citations.FromMetadata(m.Metadata) {
		urls = append(urls, c.URL)
	}
	var meta struct {
		Links struct {
			Allowed []string `json:"allowed"`
		} `json:"links"`
	}
	if len(m.Metadata) > 0 && json.Unmarshal(m.Metadata, &meta) == nil {
		urls = append(urls, meta.Links.Allowed...)
	}
	stored := citations.AllowList(urls)
	return func(u string) bool { return p.allows(u) || stored(u) }
}

// footer lists the verified sources of the final message from the stored record (never from the
// raw text), numbered like the desktop view.
func footer(m store.Message) string {
	cits := citations.FromMetadata(m.Metadata)
	if len(cits) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\n来源：")
	for i, c := range cits {
		title := c.Title
		if title == "" {
			title = c.URL
		}
		fmt.Fprintf(&b, "\n%d. %s %s", i+1, title, c.URL)
	}
	return b.String()
}

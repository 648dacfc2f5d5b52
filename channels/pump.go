package channels

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// pump turns one run's events into calls on one Reply. Events arrive on the agent's run goroutine
// through push, which never blocks; run consumes them, strips every byte, and paces Reply.Update to the
// channel's limit by coalescing deltas (each update carries the full text so far).
type pump struct {
	d   *Dispatcher
	ch  Channel
	msg Message
	log *slog.Logger

	mu     sync.Mutex
	queue  []agent.Event
	notify chan struct{}
}

func newPump(d *Dispatcher, ch Channel, m Message, log *slog.Logger) *pump {
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

func (p *pump) run(h *agent.RunHandle) {
	ctx := p.d.ctx
	var (
		reply     Reply
		started   bool
		stripper  citations.Stripper
		text      strings.Builder // marker-free text so far
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
			events = append(events, agent.Event{Type: agent.EventRunFinished, Phase: o.Phase, Error: o.Error})
		}
		for _, e := range events {
			switch e.Type {
			case agent.EventRunStarted:
				start()
			case agent.EventAnswerDelta:
				start()
				text.WriteString(stripper.Push(e.Text))
				update()
			case agent.EventAnswerFinal:
				final, haveFinal = e, true
			case agent.EventRunFinished:
				start()
				text.WriteString(stripper.Flush())
				p.finish(ctx, reply, e, final, haveFinal, text.String())
				return
			}
		}
	}
}

// finish sends the terminal text: Strip(final content) (+ sources footer) for COMPLETED runs, the
// partial text with a note for CANCELLED, the reason for FAILED.
func (p *pump) finish(ctx context.Context, reply Reply, done, final agent.Event, haveFinal bool, streamed string) {
	var text string
	var err error
	switch done.Phase {
	case store.PhaseCompleted:
		text = streamed
		if haveFinal {
			text = citations.Strip(final.Content)
			if p.d.cfg.SourcesFooter {
				text += p.footer(ctx, final.MessageID)
			}
		}
		if strings.TrimSpace(text) == "" {
			text = "（没有生成回答）"
		}
		if reply != nil {
			err = reply.Finish(ctx, citations.Strip(text))
		}
	case store.PhaseCancelled:
		text = strings.TrimSpace(streamed)
		if text != "" {
			text += "\n\n"
		}
		text += "（回答已停止）"
		if reply != nil {
			err = reply.Finish(ctx, citations.Strip(text))
		}
	default:
		text = "抱歉，这次回答失败了：" + done.Error
		if reply != nil {
			err = reply.Fail(ctx, citations.Strip(text))
		}
	}
	switch {
	case err != nil && IsPermanent(err):
		p.log.Warn("reply could not be delivered; the platform refuses further messages for now", "err", err)
	case reply == nil || err != nil:
		if err != nil {
			p.log.Warn("reply finish failed; sending plain text instead", "err", err)
		}
		p.d.send(p.ch, p.msg, text)
	}
}

// footer lists the verified sources of the final message, read back from the stored record (never from
// the raw text), numbered like the desktop view.
func (p *pump) footer(ctx context.Context, messageID uint64) string {
	if messageID == 0 {
		return ""
	}
	m, err := p.d.cfg.Store.GetMessage(ctx, messageID)
	if err != nil {
		p.log.Warn("sources footer: message lookup failed", "err", err)
		return ""
	}
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

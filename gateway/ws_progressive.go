package gateway

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/citations/markdown"
)

// Progressive rendering (issue 10, point 2): while an answer streams, the desktop view shows it
// formatted, not as raw markdown that jumps to HTML at the end. The server renders the safe text
// answer.delta already carries (markers stripped, unverified links hidden) with the same
// sanitising renderer as the final answer and sends it as answer.html {html}, the whole answer so
// far each time, so a tab that joins mid-run is complete with its first frame.
//
// Cost is bounded per run, whatever the answer's length: renders are coalesced so that rendering
// takes at most 1/renderDuty of the wall time (the next render waits renderDuty times as long as
// the last one took, and at least minRenderGap), and the frames at most maxHTMLRate bytes per
// second. Rendering happens on a timer goroutine, never in the run's goroutine.
const (
	minRenderGap = 100 * time.Millisecond
	renderDuty   = 20
	maxHTMLRate  = 64 << 10 // bytes per second per run
)

// liveAnswers holds the answers being streamed, by run id.
type liveAnswers struct {
	h *hub
	// after schedules f after d (time.AfterFunc; tests substitute their own scheduler).
	after func(d time.Duration, f func())
	// now paces renders (time.Now); it decides nothing else.
	now func() time.Time

	mu   sync.Mutex
	runs map[string]*liveAnswer
}

// liveAnswer is one streaming answer. mu orders its frames: html is queued under mu after
// checking done, and done is set under mu before the final answer is routed, so no answer.html
// ever follows answer.final on a connection.
type liveAnswer struct {
	sessionID, runID string

	mu        sync.Mutex
	text      strings.Builder
	done      bool
	scheduled bool
	rendered  int           // length of the displayed prefix last sent
	gap       time.Duration // wait before the next render
	last      time.Time     // when the last render started
}

func newLiveAnswers(h *hub) *liveAnswers {
	return &liveAnswers{
		h: h, runs: make(map[string]*liveAnswer),
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		now:   time.Now,
	}
}

// observe follows one agent event; it runs in the run's goroutine and only appends and schedules.
func (l *liveAnswers) observe(ev agent.Event) {
	switch ev.Type {
	case agent.EventAnswerDelta:
		if ev.Text == "" || ev.RunID == "" {
			return
		}
		l.mu.Lock()
		a := l.runs[ev.RunID]
		if a == nil {
			a = &liveAnswer{sessionID: ev.SessionID, runID: ev.RunID, gap: minRenderGap}
			l.runs[ev.RunID] = a
		}
		l.mu.Unlock()
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.done {
			return
		}
		a.text.WriteString(ev.Text)
		// Nobody connected: keep the text (a tab may connect mid-run) but render nothing.
		if !a.scheduled && l.h.anyClients() {
			a.scheduled = true
			// The first render goes at once (leading edge), later ones after the gap.
			wait := time.Duration(0)
			if !a.last.IsZero() {
				wait = max(0, a.gap-l.now().Sub(a.last))
			}
			l.after(wait, func() { l.render(a) })
		}
	case agent.EventAnswerFinal, agent.EventCitations, agent.EventRunFinished:
		l.mu.Lock()
		a := l.runs[ev.RunID]
		delete(l.runs, ev.RunID)
		l.mu.Unlock()
		if a != nil {
			a.mu.Lock()
			a.done = true
			a.mu.Unlock()
		}
	}
}

// render sends the answer so far to the session owner's connections, then reschedules itself when
// more text arrived meanwhile.
func (l *liveAnswers) render(a *liveAnswer) {
	defer l.h.s.recoverGo("progressive rendering")
	a.mu.Lock()
	if a.done {
		a.mu.Unlock()
		return
	}
	full := a.text.String()
	shown := displayPrefix(full)
	owner, known := l.h.owners.get(a.sessionID)
	if len(shown) == a.rendered || !known || owner == "" {
		// Nothing new to show, or nobody on this server to show it to (channel sessions, a session
		// whose owner the lane has not looked up yet): the next delta schedules again.
		a.scheduled = false
		a.mu.Unlock()
		return
	}
	a.last = l.now()
	a.mu.Unlock()

	cs := l.h.clientsOf(owner)
	var htmlLen int
	started := a.last
	if len(cs) > 0 {
		// The text passed the link filter already; the renderer may show exactly the URLs the
		// filter let through in the whole text so far. A URL cut short by displayPrefix is not one
		// of them and shows as hidden until it is complete.
		_, _, allowed := citations.FilterLinks(full, func(string) bool { return true })
		allow := citations.AllowList(allowed)
		f := &wsFrame{Type: "answer.html", SessionID: a.sessionID, RunID: a.runID}
		frames := map[string][]byte{}
		for _, c := range cs {
			if _, ok := frames[c.lang]; ok {
				continue
			}
			r := markdown.RenderAnswer(shown, nil, markdown.Options{Lang: c.lang, AllowLink: allow})
			if r.Panic != nil {
				l.h.s.log.Error("markdown renderer panicked on a streaming answer", "panic", r.Panic)
			}
			g := *f
			g.HTML = &r.HTML
			htmlLen = max(htmlLen, len(r.HTML))
			data, err := json.Marshal(&g)
			if err != nil {
				frames[c.lang] = nil
				continue
			}
			frames[c.lang] = data
		}
		took := l.now().Sub(started)
		a.mu.Lock()
		if !a.done {
			for _, c := range cs {
				if data := frames[c.lang]; data != nil {
					c.enqueue(outFrame{data: data})
				}
			}
		}
		a.gap = max(minRenderGap, renderDuty*took, time.Duration(int64(htmlLen)*int64(time.Second)/maxHTMLRate))
		a.mu.Unlock()
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	a.rendered = len(shown)
	if a.done || len(displayPrefix(a.text.String())) == a.rendered {
		a.scheduled = false
		return
	}
	l.after(max(0, a.gap-l.now().Sub(a.last)), func() { l.render(a) })
}

// displayPrefix is the part of a partial answer that already renders the way it will when the
// answer is complete, so streaming never flashes raw markdown: it holds back, from the line still
// being written, an unclosed inline construct (code span, strong or strike delimiters, a link
// whose target is still arriving) and a line that may yet become a table row or a setext
// underline; and a completed line that may be a table's header waiting for its delimiter row.
// Inside a fenced code block everything shows: the fence renders as code either way.
func displayPrefix(text string) string {
	cut := strings.LastIndexByte(text, '\n') + 1
	done, tail := text[:cut], text[cut:]
	if inFence(done) {
		return text
	}
	t := strings.TrimLeft(tail, " ")
	switch {
	case strings.HasPrefix(t, "|"):
		tail = ""
	case t != "" && strings.Trim(t, "-= ") == "":
		tail = "" // "-", "--", "===": a list bullet, a rule or a setext heading, not yet decided
	case strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"):
		tail = "" // a fence line: its info string (the language) is still arriving
	default:
		tail = cutUnclosed(tail)
	}
	if tail == "" && done != "" {
		// A complete line starting with "|" right after a non-table line may be a table header
		// whose delimiter row has not arrived: hold it back until the next line decides.
		body := strings.TrimSuffix(done, "\n")
		i := strings.LastIndexByte(body, '\n') + 1
		last := strings.TrimLeft(body[i:], " ")
		prev := ""
		if i > 0 {
			p := body[:i-1]
			prev = strings.TrimLeft(p[strings.LastIndexByte(p, '\n')+1:], " ")
		}
		if strings.HasPrefix(last, "|") && !strings.HasPrefix(prev, "|") {
			return text[:i]
		}
	}
	return done + tail
}

// inFence reports whether text (whole lines) ends inside a fenced code block.
func inFence(text string) bool {
	open := ""
	for line := range strings.Lines(text) {
		t := strings.TrimLeft(line, " ")
		for _, f := range []string{"```", "~~~"} {
			if !strings.HasPrefix(t, f) {
				continue
			}
			switch {
			case open == "":
				open = f
			case open == f && strings.TrimSpace(strings.TrimLeft(t, f[:1])) == "":
				open = ""
			}
		}
	}
	return open != ""
}

// cutUnclosed shortens the line being written to before its first construct that is still open.
func cutUnclosed(tail string) string {
	end := len(tail)
	if strings.Count(tail, "`")%2 == 1 {
		end = min(end, strings.LastIndexByte(tail, '`'))
	}
	for _, d := range []string{"**", "__", "~~"} {
		if strings.Count(tail[:end], d)%2 == 1 {
			end = min(end, strings.LastIndex(tail[:end], d))
		}
	}
	// A link or image being written: "[text" or "[text](target" with the bracket or the parenthesis
	// not closed yet.
	if i := strings.LastIndexByte(tail[:end], '['); i >= 0 {
		rest := tail[i:end]
		closeBracket := strings.IndexByte(rest, ']')
		if closeBracket < 0 || (strings.HasPrefix(rest[closeBracket+1:], "(") && !strings.Contains(rest[closeBracket+1:], ")")) {
			end = i
			if i > 0 && tail[i-1] == '!' {
				end = i - 1
			}
		}
	}
	return tail[:end]
}

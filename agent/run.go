package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// interruptedMetadata marks an ASSISTANT message holding the partial text of a run that did not
// complete; such messages are never resent to the model.
var interruptedMetadata = json.RawMessage(`{"interrupted":true}`)

// runState carries one run through the loop.
type runState struct {
	a *Agent
	h *RunHandle
	// ctx is cancelled by Cancel and Close; pctx is not, so that the outcome of a cancelled run is
	// still persisted.
	ctx  context.Context
	pctx context.Context

	reg   citations.Registry // the run's sources, numbered as the model sees them
	strip citations.Stripper // per run: answer.delta never carries a marker or part of one
	// The URLs an answer of this run may show (DESIGN §4, link rule) are the union of two sets:
	// links, every URL in this turn's text and in the run's tool results (each result read once,
	// with the registry: Registry.AddLinks), and more, the registry's URLs and those of the user
	// messages of the history window (older user messages are outside the window by design, so a URL
	// the user gave long ago no longer vouches for itself). links alone is what a chat channel's
	// reply pump is given (Event.Links, a snapshot). lf applies the union to the stream after the
	// Stripper, so answer.delta never shows an unverified URL either.
	links *citations.LinkSet
	more  *citations.LinkSet
	lf    *citations.LinkFilter
	// snap is the last snapshot of links handed out; a set only grows, so an equal Len is the
	// same set.
	snap *citations.LinkSnapshot

	runCreated bool
	concluded  bool            // a ConcludeRun was attempted
	callIDs    map[string]bool // tool call ids used in this run
	roundText  strings.Builder // raw text of the current round (markers kept)
	finalText  string

	out             Outcome
	finishedEmitted bool
}

// execute runs one turn to its end. It never panics: a panic anywhere becomes a FAILED run, and
// run.finished is always emitted.
func (a *Agent) execute(h *RunHandle) Outcome {
	rs := &runState{a: a, h: h, ctx: h.ctx, pctx: context.WithoutCancel(h.ctx), callIDs: map[string]bool{},
		links: citations.NewLinkSet(), more: citations.NewLinkSet()}
	rs.lf = citations.NewLinkFilter(rs.allows)
	phase, reason := rs.safeLoop()
	rs.safeConclude(phase, reason)
	return rs.out
}

func (rs *runState) safeLoop() (phase store.Phase, reason string) {
	defer func() {
		if r := recover(); r != nil {
			rs.a.log.Error("run panicked", "run", rs.h.ID, "session", rs.h.SessionID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			phase, reason = store.PhaseFailed, rs.a.text().internal
		}
	}()
	return rs.loop()
}

func (rs *runState) safeConclude(phase store.Phase, reason string) {
	defer func() {
		if r := recover(); r != nil {
			rs.a.log.Error("run conclusion panicked", "run", rs.h.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			rs.out.Phase, rs.out.Error, rs.out.Citations = store.PhaseFailed, rs.a.text().internal, nil
			if rs.runCreated && !rs.concluded {
				// Leave no run RUNNING behind a bug: record the failure without an answer.
				if _, _, err := rs.a.cfg.Store.ConcludeRun(rs.pctx, store.Conclusion{RunID: rs.h.ID, Phase: store.PhaseFailed, Error: rs.out.Error}); err != nil {
					rs.a.log.Error("persist run phase", "run", rs.h.ID, "err", err)
				}
			}
			if !rs.finishedEmitted {
				rs.finishedEmitted = true
				rs.a.emit(rs.h, Event{Type: EventRunFinished, Phase: rs.out.Phase, Error: rs.out.Error})
			}
		}
	}()
	rs.conclude(phase, reason)
}

// loop persists the user message and runs model rounds until a final answer, an error or
// cancellation. It returns the terminal phase and, when not COMPLETED, a reason a user can read.
func (rs *runState) loop() (store.Phase, string) {
	a, h, st := rs.a, rs.h, rs.a.cfg.Store
	txt := a.text()

	if h.turn.Stored() {
		// The caller stored the USER message and the RUNNING run when it accepted the turn.
		rs.out.UserMessageID = h.turn.UserMessageID
		rs.runCreated = true
	}
	// The window holds earlier turns only: for a turn the agent writes itself it is read before
	// this turn's USER message is written; a stored turn's window leaves it (and later queued
	// turns) out.
	history, err := rs.historyWindow()
	if err != nil {
		rs.emitStarted()
		return store.PhaseFailed, rs.storeFailed(err)
	}
	if !h.turn.Stored() {
		if err := rs.startTurn(); err != nil {
			rs.emitStarted()
			return store.PhaseFailed, rs.storeFailed(err)
		}
	}
	rs.links.AddText(h.turn.Text)
	for _, m := range history {
		if m.Role == "user" {
			rs.more.AddText(m.Content)
		}
	}
	rs.emitStarted()

	msgs := append([]ChatMessage{{Role: "system", Content: SystemPrompt(a.cfg.Lang, a.cfg.Now())}}, history...)
	msgs = append(msgs, ChatMessage{Role: "user", Content: h.turn.Text})

	for round := 1; ; round++ {
		if rs.ctx.Err() != nil {
			return store.PhaseCancelled, ""
		}
		resp, err := rs.generate(msgs)
		// A cancelled run stays cancelled even when the model finished its round regardless.
		if rs.ctx.Err() != nil {
			return store.PhaseCancelled, ""
		}
		if err != nil {
			a.log.Warn("model round failed", "run", h.ID, "round", round, "err", err)
			return store.PhaseFailed, txt.modelFailed()
		}
		if len(resp.ToolCalls) == 0 {
			rs.finalText = rs.roundText.String()
			rs.roundText.Reset()
			if strings.TrimSpace(rs.finalText) == "" {
				return store.PhaseFailed, txt.emptyAnswer
			}
			return store.PhaseCompleted, ""
		}
		if round >= a.cfg.MaxRounds {
			return store.PhaseFailed, txt.toolRounds(a.cfg.MaxRounds)
		}
		calls := make([]store.ToolCall, len(resp.ToolCalls))
		for i, c := range resp.ToolCalls {
			// Ids pair each TOOL message with its call; some compatible servers omit or reuse them.
			if c.ID == "" || rs.callIDs[c.ID] {
				c.ID = fmt.Sprintf("call_%d_%d", round, i+1)
			}
			for rs.callIDs[c.ID] {
				c.ID += "_"
			}
			rs.callIDs[c.ID] = true
			calls[i] = c
		}
		text := rs.roundText.String()
		rs.roundText.Reset()
		msgs = append(msgs, ChatMessage{Role: "assistant", Content: text, ToolCalls: calls})

		for _, c := range calls {
			a.emit(h, Event{Type: EventToolStarted, CallID: c.ID, Tool: c.Name, Arguments: c.Arguments})
		}
		results := rs.runTools(calls)
		// The round (the tool-calling message and its results) is one store transaction, committed
		// before any tool.finished, so whoever reacts to that event finds the results (turn.go).
		round := make([]store.Message, 0, 1+len(calls))
		round = append(round, store.Message{SessionID: h.SessionID, RunID: h.ID, Role: store.RoleAssistant, Content: text, ToolCalls: calls})
		for i, c := range calls {
			at := a.cfg.Now()
			// The run's registry grows here, as each result arrives, and the same call numbers the
			// sources handed to the model: the model's [^n^] and the verifier's n denote the same
			// source, and nothing is re-read or re-parsed when the run concludes.
			// The same one reading of the result gives the link set every URL it holds.
			content := rs.reg.AddLinks(citations.ToolResult{Tool: c.Name, CallID: c.ID, Content: results[i].content, At: at}, rs.links)
			round = append(round, store.Message{SessionID: h.SessionID, RunID: h.ID, Role: store.RoleTool, Content: content, ToolCallID: c.ID, ToolName: c.Name, CreatedAt: at})
		}
		stored, err := st.AppendMessages(rs.pctx, round)
		if err != nil {
			return store.PhaseFailed, rs.storeFailed(err)
		}
		for _, m := range stored {
			if m.Role == store.RoleTool && m.ID != 0 {
				rs.reg.SetMessageID(m.ToolCallID, m.ID)
			}
		}
		snap := rs.snapshot()
		for i, c := range calls {
			a.emit(h, Event{Type: EventToolFinished, CallID: c.ID, Tool: c.Name, OK: results[i].ok, Links: snap})
			msgs = append(msgs, ChatMessage{Role: "tool", Content: round[1+i].Content, ToolCallID: c.ID, Name: c.Name})
		}
		for _, src := range rs.reg.Sources() {
			rs.more.AddURL(src.URL)
		}
	}
}

func (rs *runState) emitStarted() {
	rs.a.emit(rs.h, Event{Type: EventRunStarted, UserMessageID: rs.out.UserMessageID, Model: rs.a.ModelName(), Links: rs.snapshot()})
}

// allows is the run's link rule: a URL of this turn or of its tool results, a registry URL, or
// one of the history window's user messages.
func (rs *runState) allows(u string) bool { return rs.links.Allows(u) || rs.more.Allows(u) }

// snapshot is an immutable copy of links for the events that hand it to other goroutines; it is
// copied only when the set grew since the last one.
func (rs *runState) snapshot() *citations.LinkSnapshot {
	if rs.snap == nil || rs.snap.Len() != rs.links.Len() {
		rs.snap = rs.links.Snapshot()
	}
	return rs.snap
}

// generate runs one model round, streaming its text through the run's Stripper. A panicking model
// becomes an error.
func (rs *runState) generate(msgs []ChatMessage) (resp ModelResponse, err error) {
	onDelta := func(d string) {
		if d == "" {
			return
		}
		rs.roundText.WriteString(d)
		if out := rs.lf.Push(rs.strip.Push(d)); out != "" {
			rs.a.emit(rs.h, Event{Type: EventAnswerDelta, Text: out})
		}
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				rs.a.log.Error("model panicked", "run", rs.h.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = fmt.Errorf("model %s panicked: %v", rs.a.ModelName(), r)
			}
		}()
		resp, err = rs.a.cfg.Model.Generate(rs.ctx, ModelRequest{Messages: msgs, Tools: rs.a.specs}, onDelta)
	}()
	// A model that does not stream still shows its text, through the same stripper.
	if err == nil && rs.roundText.Len() == 0 && resp.Text != "" {
		onDelta(resp.Text)
	}
	// Subscribers see the text of all rounds as one stream, so a tail held back at the end of a round
	// that calls tools could still join the next round's text into a marker ("[^1" + "^]"): keep it.
	// Only when the text has ended for good (final round, or an error) is it released.
	if err != nil || len(resp.ToolCalls) == 0 {
		if out := rs.lf.Push(rs.strip.Flush()) + rs.lf.Flush(); out != "" {
			rs.a.emit(rs.h, Event{Type: EventAnswerDelta, Text: out})
		}
	}
	return resp, err
}

type toolOutcome struct {
	content string
	ok      bool
}

// runTools runs the calls concurrently, each bounded by ToolTimeout, and returns their contents in
// call order. Failures become {"error": …} content for the model; they never end the run.
func (rs *runState) runTools(calls []store.ToolCall) []toolOutcome {
	out := make([]toolOutcome, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = rs.callTool(c)
		}()
	}
	wg.Wait()
	return out
}

func (rs *runState) callTool(c store.ToolCall) toolOutcome {
	a := rs.a
	txt := a.text()
	tool := a.tools[c.Name]
	if tool == nil {
		return toolOutcome{content: errorJSON(txt.unknownTool(c.Name))}
	}
	args := strings.TrimSpace(c.Arguments)
	if args == "" {
		args = "{}"
	}
	// What decoding into a map accepts (a non-nil map), without building the map.
	if !isJSONObject([]byte(args)) {
		return toolOutcome{content: errorJSON(txt.badArguments(c.Name))}
	}

	ctx, cancel := context.WithTimeout(rs.ctx, a.cfg.ToolTimeout)
	defer cancel()
	type result struct {
		content string
		err     error
	}
	// The tool runs in its own goroutine so a tool that ignores its context cannot hold the run
	// past the timeout; its late result is dropped.
	done := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				a.log.Error("tool panicked", "tool", c.Name, "run", rs.h.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				done <- result{err: errors.New(txt.toolPanicked(c.Name))}
			}
		}()
		content, err := tool.Call(ctx, args)
		done <- result{content, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		if rs.ctx.Err() != nil {
			res.err = errors.New(txt.cancelled)
		} else {
			res.err = errors.New(txt.toolTimeout(c.Name, a.cfg.ToolTimeout))
		}
	}
	if res.err != nil {
		a.log.Info("tool call failed", "tool", c.Name, "run", rs.h.ID, "err", res.err)
		return toolOutcome{content: errorJSON(res.err.Error())}
	}
	return toolOutcome{content: res.content, ok: !hasErrorKey(res.content)}
}

// conclude commits the run's record in one store transaction (final or partial answer with its
// metadata, terminal phase, marker counts), then emits the closing events and runs the completion
// hooks. Citations are verified before the commit against the registry the run built as its tool
// results arrived.
func (rs *runState) conclude(phase store.Phase, reason string) {
	a, h := rs.a, rs.h
	if !rs.runCreated {
		// Nothing of the run was recorded beyond, at most, the user message.
		rs.finish(phase, reason, citations.Verification{})
		return
	}
	c := store.Conclusion{RunID: h.ID, Phase: phase, Error: reason}
	var ver citations.Verification
	switch {
	case phase == store.PhaseCompleted:
		ver = citations.Verify(rs.finalText, &rs.reg)
		if rs.reg.Overflow > 0 {
			a.log.Debug("registry cap reached", "run", h.ID, "dropped_sources", rs.reg.Overflow)
		}
		_, hidden, shown := citations.FilterLinks(rs.finalText, rs.allows)
		rs.out.LinksHidden = hidden
		meta, err := answerMetadata(ver, hidden, shown)
		if err != nil {
			a.log.Error("encode citations", "run", h.ID, "err", err)
			rs.finishWithoutAnswer(store.PhaseFailed, a.text().internal)
			return
		}
		c.Final = &store.Message{SessionID: h.SessionID, RunID: h.ID, Role: store.RoleAssistant, Content: rs.finalText, Metadata: meta}
		c.MarkersSeen, c.MarkersKept, c.MarkersDropped = ver.Seen, ver.Kept, ver.Dropped
	case rs.roundText.Len() > 0:
		// Partial text of a cancelled or failed run is kept, marked so it is never resent to the
		// model and never gets citations.
		c.Final = &store.Message{SessionID: h.SessionID, RunID: h.ID, Role: store.RoleAssistant, Content: rs.roundText.String(), Metadata: interruptedMetadata}
	}
	rs.concluded = true
	run, final, err := a.cfg.Store.ConcludeRun(rs.pctx, c)
	if err != nil {
		a.log.Error("persist run conclusion", "run", h.ID, "phase", phase, "err", err)
		if phase == store.PhaseCompleted {
			rs.finishWithoutAnswer(store.PhaseFailed, rs.storeFailed(err))
			return
		}
		// The partial text is not worth losing the phase over: record the phase alone.
		rs.finishWithoutAnswer(phase, reason)
		return
	}
	if ver.Dropped > 0 {
		a.log.Info("dropped citation markers", "run", h.ID, "seen", ver.Seen, "kept", ver.Kept, "dropped", ver.Dropped, "sources", rs.reg.Len())
	}
	var fp *store.Message
	if c.Final != nil {
		fp = &final
		rs.out.FinalMessageID = final.ID
		rs.out.Content = final.Content
		a.emit(h, Event{Type: EventAnswerFinal, MessageID: final.ID, Content: final.Content, Metadata: final.Metadata})
		if len(ver.Citations) > 0 {
			a.emit(h, Event{Type: EventCitations, MessageID: final.ID, Citations: ver.Citations, Metadata: final.Metadata})
		}
	}
	rs.runHooks(RunResult{Run: run, Final: fp})
	rs.finish(phase, reason, ver)
}

// finishWithoutAnswer records phase without any answer, after the full conclusion could not be
// stored (a second, smaller transaction; if that fails too the run stays RUNNING until the next
// start marks it FAILED "interrupted"), and reports it: the live view shows what the record holds.
func (rs *runState) finishWithoutAnswer(phase store.Phase, reason string) {
	a, h := rs.a, rs.h
	rs.concluded = true
	if _, _, err := a.cfg.Store.ConcludeRun(rs.pctx, store.Conclusion{RunID: h.ID, Phase: phase, Error: reason}); err != nil {
		a.log.Error("persist run phase", "run", h.ID, "phase", phase, "err", err)
	}
	rs.finish(phase, reason, citations.Verification{})
}

// finish sets the outcome and emits run.finished, the run's last event.
func (rs *runState) finish(phase store.Phase, reason string, ver citations.Verification) {
	rs.out.Phase, rs.out.Error = phase, reason
	rs.out.Citations = ver.Citations
	rs.finishedEmitted = true
	rs.a.emit(rs.h, Event{Type: EventRunFinished, Phase: phase, Error: reason,
		MarkersSeen: ver.Seen, MarkersKept: ver.Kept, MarkersDropped: ver.Dropped, LinksHidden: rs.out.LinksHidden})
}

// answerMetadata is the final answer's metadata: the verified citations, when there is at least
// one (DESIGN §4: no valid marker, no key), and the link decision when the answer shows any URL
// outside code: {"hidden": n, "allowed": [the verified URLs it shows]}, so that every renderer
// applies the same rule from the record.
func answerMetadata(ver citations.Verification, hidden int, shown []string) (json.RawMessage, error) {
	meta := map[string]any{}
	if len(ver.Citations) > 0 {
		meta["citations"] = ver.Citations
	}
	if hidden > 0 || len(shown) > 0 {
		if shown == nil {
			shown = []string{}
		}
		meta["links"] = linkDecision{Hidden: hidden, Allowed: shown}
	}
	if len(meta) == 0 {
		return nil, nil
	}
	raw, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode answer metadata: %w", err)
	}
	return raw, nil
}

// linkDecision is metadata.links of a final answer.
type linkDecision struct {
	Hidden  int      `json:"hidden"`
	Allowed []string `json:"allowed"`
}

// historyWindow returns the conversation the model sees before this turn: the newest USER messages
// and final ASSISTANT answers that fit in historyBudget characters (at most maxHistoryMessages),
// in conversation order, markers stripped (their numbers referred to earlier runs' sources),
// interrupted answers and tool traffic left out. It reads the session backwards a page at a time
// and stops as soon as the window is full, so its cost does not grow with the session.
//
// A stored turn (Turn.Stored) was written when it was accepted, possibly while earlier turns of the
// session were still waiting or running, so the session holds its USER message (and those of turns
// queued after it) before the answers of the earlier runs. Its window leaves out every USER message
// from its own on, and puts each earlier answer back behind the question it answers.
func (rs *runState) historyWindow() ([]ChatMessage, error) {
	var rev []windowItem // newest first
	budget := historyBudget
	cursor := uint64(0)
	own := rs.h.turn.UserMessageID
fill:
	for len(rev) < maxHistoryMessages {
		page, err := rs.a.cfg.Store.ListDialogLinesBefore(rs.pctx, rs.h.SessionID, cursor, historyPage)
		if err != nil {
			return nil, err
		}
		for i := len(page) - 1; i >= 0; i-- {
			m := page[i]
			if own != 0 && m.Role == store.RoleUser && m.ID >= own {
				continue
			}
			cm, ok := historyMessage(m)
			if !ok {
				continue
			}
			n := utf8.RuneCountInString(cm.Content)
			if n > budget || len(rev) >= maxHistoryMessages {
				break fill
			}
			budget -= n
			rev = append(rev, windowItem{m, cm})
		}
		if len(page) < historyPage {
			break
		}
		cursor = page[0].ID
	}
	slices.Reverse(rev)
	conversationOrder(rev)
	out := make([]ChatMessage, len(rev))
	for i, it := range rev {
		out[i] = it.cm
	}
	return out, nil
}

// windowItem is a stored message of the history window and what the model sees of it.
type windowItem struct {
	m  store.DialogLine
	cm ChatMessage
}

// conversationOrder puts each answer right behind the question of its run. Messages come in id
// order, which is conversation order unless questions were stored while earlier runs were still
// answering (stored turns): then an answer follows later questions. An answer whose question is
// not in the window (older, or written before runs were recorded on messages) keeps its place
// relative to the message before it, so for ordinary sessions the order is unchanged.
func conversationOrder(items []windowItem) {
	question := make(map[string]uint64, len(items))
	for _, it := range items {
		m := it.m
		if m.Role == store.RoleUser && m.RunID != "" {
			question[m.RunID] = m.ID
		}
	}
	keys := make(map[uint64]uint64, len(items))
	var prev uint64
	for _, it := range items {
		m, k := it.m, prev
		switch {
		case m.Role == store.RoleUser:
			k = m.ID
		case m.RunID != "" && question[m.RunID] != 0:
			k = question[m.RunID]
		}
		keys[m.ID], prev = k, k
	}
	slices.SortStableFunc(items, func(a, b windowItem) int { return cmp.Compare(keys[a.m.ID], keys[b.m.ID]) })
}

// historyMessage turns one stored message into model history; ok is false for messages the model
// does not get again.
func historyMessage(m store.DialogLine) (ChatMessage, bool) {
	var role string
	switch m.Role {
	case store.RoleUser:
		role = "user"
	case store.RoleAssistant:
		if m.Interrupted {
			return ChatMessage{}, false
		}
		role = "assistant"
	default:
		return ChatMessage{}, false
	}
	content := citations.Strip(m.Content)
	if strings.TrimSpace(content) == "" {
		return ChatMessage{}, false
	}
	return ChatMessage{Role: role, Content: content}, true
}

func errorJSON(msg string) string {
	b, err := json.Marshal(map[string]string{"error": msg})
	if err != nil {
		return `{"error":"internal error"}`
	}
	return string(b)
}

// hasErrorKey reports whether content is a JSON object with a top-level "error" key, the failure
// shape of DESIGN §4. A key "error" is written either plainly or with a \u escape for one of its
// letters (e, r, o: \u0065, \u0072, \u006f); a result holding neither, as successful results
// mostly do, is not decoded at all.
func hasErrorKey(content string) bool {
	if !strings.Contains(content, `"error"`) && !strings.Contains(content, `\u006`) && !strings.Contains(content, `\u007`) {
		return false
	}
	return decodedHasErrorKey(content)
}

// decodedHasErrorKey is hasErrorKey by decoding content.
func decodedHasErrorKey(content string) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal([]byte(content), &top) != nil {
		return false
	}
	_, ok := top["error"]
	return ok
}

// storeFailed logs a store failure of the run and returns what the user reads instead of it.
func (rs *runState) storeFailed(err error) string {
	rs.a.log.Error("run store failure", "run", rs.h.ID, "session", rs.h.SessionID, "err", err)
	return rs.a.text().storeFailed()
}

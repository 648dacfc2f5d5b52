package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/citegate/citegate/store"
)

// maxHistoryLimit bounds ?limit= of GET /api/sessions/{id}/messages.
const maxHistoryLimit = 500

// handleMessages answers GET /api/sessions/{id}/messages with {"messages":[…],"sessionId"}: the
// session's visible messages, oldest first, each final answer with its run's tool lines.
//
// Without parameters that is the whole conversation, streamed (historyStream): the store is read
// forward a page at a time and each message is written as it is read, so a session of any length
// costs one page of memory. With ?limit=N and/or ?before=<messageId> it is one page instead, the
// one the websocket's session.open / session.more send: at most N (default 50, at most 500)
// visible messages just older than message before (absent: the newest), within the same 2 MiB
// content budget, and the answer adds "hasMore" (older messages remain: ask again with before =
// the id of the oldest message received) and, when given, "before".
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request, u store.User) error {
	sess, err := s.ownedSession(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if !q.Has("limit") && !q.Has("before") {
		return s.historyStream(w, r, sess.ID, langOf(r))
	}
	limit, before := historyPageSize, uint64(0)
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > maxHistoryLimit {
			return errBadRequest("limit must be a number from 1 to " + strconv.Itoa(maxHistoryLimit))
		}
		limit = n
	}
	if q.Has("before") {
		id, err := strconv.ParseUint(q.Get("before"), 10, 64)
		if err != nil || id == 0 {
			return errBadRequest("before must be a message id (the oldest message shown)")
		}
		before = id
	}
	msgs, more, err := s.historyPageN(r.Context(), sess.ID, before, limit, langOf(r))
	if err != nil {
		return s.storeErr("list_dialog_before", err)
	}
	out := struct {
		Messages  []messageJSON `json:"messages"`
		SessionID string        `json:"sessionId"`
		HasMore   bool          `json:"hasMore"`
		Before    uint64        `json:"before,omitempty"`
	}{msgs, sess.ID, more, before}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// historyStream writes a session's whole conversation as {"messages":[…],"sessionId"} (the keys in
// the order the answer always had), walking the session forward a page at a time up to its newest
// message at the start (messagePages, as the export does). The tool lines of a final answer come
// from the tool calls and results read before it in the same walk: a run's calls and results are
// stored before its answer, so only the lines of runs whose answer is still to come are held.
// The first page is read before anything is sent, so a failing store is still a proper error; a
// store error later cuts the answer short (the status is already sent), logged and counted.
func (s *Server) historyStream(w http.ResponseWriter, r *http.Request, sessionID, lang string) error {
	ctx := r.Context()
	last, err := s.st.LastMessageID(ctx, sessionID)
	if err != nil {
		return s.storeErr("last_message_id", err)
	}
	next := s.messagePages(ctx, sessionID, last)
	page, err := next()
	if err != nil {
		return s.storeErr("list_messages_after", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteString(`{"messages":[`)
	rc := http.NewResponseController(w)
	var lines runLines
	first := true
	for len(page) > 0 {
		for _, m := range page {
			lines.note(m)
			if !visible(m) {
				continue
			}
			mj := s.toMessageJSON(m, lang)
			if m.Role == store.RoleAssistant && m.RunID != "" {
				mj.Tools = lines.take(m.RunID)
			}
			if !first {
				buf.WriteByte(',')
			}
			first = false
			if err := enc.Encode(mj); err != nil {
				s.log.WarnContext(ctx, "history: encode message", "message", m.ID, "err", err)
				return nil
			}
			buf.Truncate(buf.Len() - 1) // Encode's newline
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			s.log.DebugContext(ctx, "history aborted", "session", sessionID, "err", err)
			return nil
		}
		buf.Reset()
		_ = rc.Flush() // not every writer flushes; the data still arrives at the end
		if page, err = next(); err != nil {
			s.storeErr("list_messages_after", err)
			s.log.ErrorContext(ctx, "history cut short by a store error", "session", sessionID, "err", err)
			return nil
		}
	}
	buf.WriteString(`],"sessionId":`)
	sid, _ := json.Marshal(sessionID)
	buf.Write(sid)
	buf.WriteString("}\n")
	if _, err := w.Write(buf.Bytes()); err != nil {
		s.log.DebugContext(ctx, "history aborted", "session", sessionID, "err", err)
	}
	return nil
}

// runLines gathers, while a session is read forward, the tool lines of the runs whose answer has
// not been read yet (runToolLines is this collector over a whole run): a call is ok when its
// run's result for it is not an error object; the last result of a call counts.
type runLines struct {
	lines map[string][]toolLineJSON // run id → its tool lines so far
	calls map[string]map[string]int // run id → call id → index of its line
}

// note takes in m: an assistant message's tool calls become lines, a tool result settles its call.
func (l *runLines) note(m store.Message) {
	if m.RunID == "" {
		return
	}
	switch {
	case m.Role == store.RoleAssistant && len(m.ToolCalls) > 0:
		if l.lines == nil {
			l.lines, l.calls = map[string][]toolLineJSON{}, map[string]map[string]int{}
		}
		calls := l.calls[m.RunID]
		if calls == nil {
			calls = map[string]int{}
			l.calls[m.RunID] = calls
		}
		for _, c := range m.ToolCalls {
			calls[c.ID] = len(l.lines[m.RunID])
			l.lines[m.RunID] = append(l.lines[m.RunID], toolLineJSON{CallID: c.ID, Tool: c.Name, Arguments: toolLabelArgs(c.Arguments)})
		}
	case m.Role == store.RoleTool && m.ToolCallID != "":
		if i, ok := l.calls[m.RunID][m.ToolCallID]; ok {
			l.lines[m.RunID][i].OK = !hasErrorKey(m.Content)
		}
	}
}

// take hands over the lines of run id and forgets them: its answer is being written.
func (l *runLines) take(runID string) []toolLineJSON {
	out := l.lines[runID]
	delete(l.lines, runID)
	delete(l.calls, runID)
	return out
}

package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// exportLine is one JSONL line: the stored record of one message. Content keeps the raw markers and
// metadata keeps citations, so an export can be verified offline.
type exportLine struct {
	ID         uint64           `json:"id"`
	SessionID  string           `json:"sessionId"`
	RunID      string           `json:"runId,omitempty"`
	Role       store.Role       `json:"role"`
	Content    string           `json:"content"`
	ToolCalls  []store.ToolCall `json:"toolCalls,omitempty"`
	ToolCallID string           `json:"toolCallId,omitempty"`
	ToolName   string           `json:"toolName,omitempty"`
	Metadata   json.RawMessage  `json:"metadata,omitempty"`
	CreatedAt  time.Time        `json:"createdAt"`
}

func (s *Server) handleExport(w http.ResponseWriter, r *http.Request, u store.User) error {
	sess, err := s.ownedSession(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	// The export walks the session forward a page at a time, each page its own short read: a
	// session of any length costs one page of memory, and a slow download holds no read
	// transaction open. The first page is read before anything is sent, so a failing store is
	// still a proper error response. Messages appended while the download runs are included up to
	// the newest one at its start.
	last, err := s.st.LastMessageID(r.Context(), sess.ID)
	if err != nil {
		return s.storeErr("last_message_id", err)
	}
	next := s.messagePages(r.Context(), sess.ID, last)
	first, err := next()
	if err != nil {
		return s.storeErr("list_messages_after", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	s.streamJSONL(w, r, sess, first, next, ownerLine)
	return nil
}

// exportPage is how many messages one store read of an export fetches.
const exportPage = 256

// messagePages returns an iterator over a session's messages with ids up to last, a page per call
// in ascending order; an empty page means the end.
func (s *Server) messagePages(ctx context.Context, sessionID string, last uint64) func() ([]store.Message, error) {
	cursor := uint64(0)
	return func() ([]store.Message, error) {
		if cursor >= last {
			return nil, nil
		}
		page, err := s.st.ListMessagesAfter(ctx, sessionID, cursor, exportPage)
		if err != nil {
			return nil, err
		}
		for i, m := range page {
			if m.ID > last {
				page = page[:i]
				break
			}
		}
		if len(page) == 0 {
			cursor = last
			return nil, nil
		}
		cursor = page[len(page)-1].ID
		return page, nil
	}
}

// ownerLine is the owner's export of m: the whole stored record (data: URIs in metadata scrubbed).
func ownerLine(m store.Message) (exportLine, bool) {
	return exportLine{
		ID: m.ID, SessionID: m.SessionID, RunID: m.RunID, Role: m.Role, Content: m.Content,
		ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, ToolName: m.ToolName,
		Metadata: scrubMetadata(m.Metadata), CreatedAt: m.CreatedAt,
	}, true
}

// publicLine is the share export of m: only what the share page shows. A shared conversation is
// read by anyone holding the link, so tool calls (their arguments), tool results (documents the
// answer may never have cited, excerpts included) and every metadata key but the verified
// citations stay out. The line keeps the owner's export shape (a subset of its fields), so one
// reader handles both; an answer's content keeps its raw markers so the citations can be checked
// offline, with the link rule applied.
func publicLine(m store.Message) (exportLine, bool) {
	if !visible(m) {
		return exportLine{}, false
	}
	line := exportLine{ID: m.ID, SessionID: m.SessionID, Role: m.Role, Content: m.Content, CreatedAt: m.CreatedAt}
	if m.Role == store.RoleAssistant {
		cits := citations.FromMetadata(m.Metadata)
		// The link rule holds here too: an anonymous reader gets no unverified URL, not even in
		// the raw text. Markers stay, so the citations can still be checked against the content.
		line.Content, _, _ = citations.FilterLinks(m.Content, allowFunc(m.Metadata, cits))
		// The lead is tool output (the excerpt's first lines): the owner's desktop shows it on
		// a source card, an anonymous reader gets no excerpt at all. Nor the ids of the tool
		// call and message it came from: the tool record is not part of a share.
		for i := range cits {
			cits[i].Lead, cits[i].CallID, cits[i].MessageID = "", "", 0
		}
		if len(cits) > 0 {
			md, err := json.Marshal(map[string][]citations.Citation{"citations": cits})
			if err == nil {
				line.Metadata = md
			}
		}
	}
	return line, true
}

// streamJSONL writes one object per line as it goes: first, then every page next returns until an
// empty one. Nothing but the current page is held. lineOf decides what a message becomes (false:
// left out). A store error after the first page ends the download early (the status is already
// sent); it is logged and counted.
func (s *Server) streamJSONL(w http.ResponseWriter, r *http.Request, sess store.Session, first []store.Message, next func() ([]store.Message, error), lineOf func(store.Message) (exportLine, bool)) {
	w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="citegate-`+safeFileName(sess.ID)+`.jsonl"`)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	rc := http.NewResponseController(w)
	written := 0
	for page := first; len(page) > 0; {
		for _, m := range page {
			line, ok := lineOf(m)
			if !ok {
				continue
			}
			if err := enc.Encode(line); err != nil {
				s.log.DebugContext(r.Context(), "export aborted", "session", sess.ID, "err", err)
				return
			}
			written++
			if written%64 == 0 {
				_ = rc.Flush() // not every writer flushes; the data still arrives at the end
			}
		}
		var err error
		if page, err = next(); err != nil {
			s.storeErr("list_messages_after", err)
			s.log.ErrorContext(r.Context(), "export cut short by a store error", "session", sess.ID, "err", err)
			return
		}
	}
}

func safeFileName(id string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, id)
}

// dataURI matches a base64 data: URI, anywhere inside a string.
var dataURI = regexp.MustCompile(`data:([a-zA-Z0-9!#$&^_.+-]+/[a-zA-Z0-9!#$&^_.+-]+)?((?:;[a-zA-Z0-9!#$&^_.+-]+=[^;,"]*)*);base64,([A-Za-z0-9+/=_-]+)`)

// scrubMetadata replaces every base64 data: URI in string values of metadata (at any depth) with a
// short placeholder such as "[data URI removed: image/png, 12 KB]". Metadata without one comes back
// byte for byte; metadata that is not valid JSON comes back unchanged (it is the record).
func scrubMetadata(md json.RawMessage) json.RawMessage {
	if len(md) == 0 || !bytes.Contains(md, []byte("base64,")) {
		return md
	}
	dec := json.NewDecoder(bytes.NewReader(md))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return md
	}
	v, changed := scrubValue(v)
	if !changed {
		return md
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return md
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func scrubValue(v any) (any, bool) {
	switch t := v.(type) {
	case string:
		if !strings.Contains(t, "base64,") {
			return t, false
		}
		out := dataURI.ReplaceAllStringFunc(t, placeholder)
		return out, out != t
	case map[string]any:
		changed := false
		for k, e := range t {
			if ne, c := scrubValue(e); c {
				t[k], changed = ne, true
			}
		}
		return t, changed
	case []any:
		changed := false
		for i, e := range t {
			if ne, c := scrubValue(e); c {
				t[i], changed = ne, true
			}
		}
		return t, changed
	}
	return v, false
}

func placeholder(uri string) string {
	m := dataURI.FindStringSubmatch(uri)
	mime := "application/octet-stream"
	if m[1] != "" {
		mime = strings.ToLower(m[1])
	}
	payload := strings.TrimRight(m[3], "=")
	size := base64.RawStdEncoding.DecodedLen(len(payload))
	if !utf8.ValidString(mime) {
		mime = "application/octet-stream"
	}
	return "[data URI removed: " + mime + ", " + formatBytes(size) + "]"
}

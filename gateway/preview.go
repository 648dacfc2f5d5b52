package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// MaxExcerptUTF16 bounds preview excerpts, in UTF-16 code units (what browsers count).
const MaxExcerptUTF16 = 16384

type previewJSON struct {
	N           int        `json:"n"`
	URL         string     `json:"url"`
	Title       string     `json:"title"`
	Tool        string     `json:"tool"`
	Excerpt     string     `json:"excerpt"`
	Truncated   bool       `json:"truncated"`
	RetrievedAt *time.Time `json:"retrievedAt,omitempty"`
	Digest      string     `json:"digest"`
	Changed     *bool      `json:"changed,omitempty"`
}

// handlePreview returns the text the model was given for citation n of a final answer: the run's
// registry is rebuilt from the run's stored TOOL messages, exactly as the citation hook built it.
func (s *Server) handlePreview(w http.ResponseWriter, r *http.Request, u store.User) error {
	w.Header().Set("Cache-Control", "no-store")
	m, err := s.ownedMessage(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		return errNotFound()
	}
	if m.Role != store.RoleAssistant || len(m.ToolCalls) > 0 || m.RunID == "" {
		return errNotFound()
	}
	var cit *citations.Citation
	for _, c := range citations.FromMetadata(m.Metadata) {
		if c.N == n {
			cit = &c
			break
		}
	}
	if cit == nil {
		return errNotFound()
	}
	all, err := s.st.ListMessages(r.Context(), m.SessionID)
	if err != nil {
		return s.storeErr("list_messages", err)
	}
	var results []citations.ToolResult
	for _, t := range all {
		if t.Role == store.RoleTool && t.RunID == m.RunID {
			results = append(results, citations.ToolResult{Tool: t.ToolName, CallID: t.ToolCallID, MessageID: t.ID, Content: t.Content, At: t.CreatedAt})
		}
	}
	src, ok := citations.BuildRegistry(results).Lookup(n)
	if !ok || src.URL != cit.URL {
		// The record and the run's tool messages disagree; showing a different source's text
		// would be worse than showing none.
		s.log.WarnContext(r.Context(), "preview: citation does not match the run's registry", "message", m.ID, "n", n)
		return errNotFound()
	}
	excerpt, truncated := cutUTF16(src.Excerpt, MaxExcerptUTF16)
	out := previewJSON{
		N: n, URL: cit.URL, Title: cit.Title, Tool: src.Tool, Excerpt: excerpt, Truncated: truncated,
		RetrievedAt: cit.RetrievedAt, Digest: cit.Digest,
	}
	if out.Title == "" {
		out.Title = src.Title
	}
	if out.Digest == "" {
		out.Digest = citations.Digest(src.Excerpt)
	}
	if out.RetrievedAt == nil && !src.At.IsZero() {
		at := src.At.UTC()
		out.RetrievedAt = &at
	}
	if r.URL.Query().Get("recheck") == "1" {
		changed, err := s.recheck(r.Context(), src, out.Digest)
		if err != nil {
			return err
		}
		out.Changed = &changed
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// recheck fetches the source's live text and reports whether it differs from what the model saw:
// for a page, by digest; for a search snippet, by whether the snippet still appears in the page.
func (s *Server) recheck(ctx context.Context, src citations.Source, digest string) (bool, error) {
	if s.cfg.Fetch == nil {
		return false, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "live recheck is not available on this server"}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	text, err := s.cfg.Fetch(ctx, src.URL)
	if err != nil {
		return false, &Error{Status: http.StatusBadGateway, Code: CodeFetchFailed, Message: "could not fetch the source: " + err.Error(), Err: err}
	}
	if src.Tool == citations.ToolOpenWebPage {
		return citations.Digest(text) != digest, nil
	}
	return !snippetPresent(src.Excerpt, text), nil
}

// snippetPresent reports whether every piece of a search snippet (search engines join pieces with
// ellipses) still appears in the page text, ignoring whitespace and case.
func snippetPresent(snippet, page string) bool {
	hay := squash(page)
	found := false
	for _, piece := range strings.FieldsFunc(snippet, func(r rune) bool { return r == '…' }) {
		for _, p := range strings.Split(piece, "...") {
			p = squash(p)
			if p == "" {
				continue
			}
			if !strings.Contains(hay, p) {
				return false
			}
			found = true
		}
	}
	return found
}

func squash(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if unicode.IsSpace(r) {
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// cutUTF16 returns the longest prefix of s that fits in max UTF-16 code units, never splitting a
// surrogate pair.
func cutUTF16(s string, max int) (string, bool) {
	units := 0
	for i, r := range s {
		n := utf16.RuneLen(r)
		if n < 0 {
			n = 1 // invalid runes are replaced by U+FFFD when encoded: one unit
		}
		if units+n > max {
			return s[:i], true
		}
		units += n
	}
	return s, false
}

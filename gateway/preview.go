package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"

	"golang.org/x/text/unicode/norm"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/citations/markdown"
	"github.com/citegate/citegate/internal/textseg"
	"github.com/citegate/citegate/store"
)

// MaxExcerptUTF16 bounds preview excerpts, in UTF-16 code units (what browsers count).
const MaxExcerptUTF16 = 16384

type previewJSON struct {
	N       int    `json:"n"`
	URL     string `json:"url"`
	Title   string `json:"title"`
	Tool    string `json:"tool"`
	Excerpt string `json:"excerpt"`
	// ExcerptHTML is Excerpt rendered as sanitised markdown (headings, lists, tables), the way the
	// excerpt panel shows it; links only to URLs the excerpt itself holds.
	ExcerptHTML string `json:"excerptHtml"`
	// Site names the source's site: the domain, or a corpus page's document title.
	Site        string     `json:"site"`
	Truncated   bool       `json:"truncated"`
	RetrievedAt *time.Time `json:"retrievedAt,omitempty"`
	Digest      string     `json:"digest"`
	// Changed is the recheck's verdict as a boolean (true for "changed", false for "unchanged");
	// absent without recheck and when the page could not be reached. Recheck has the details.
	Changed *bool        `json:"changed,omitempty"`
	Recheck *recheckJSON `json:"recheck,omitempty"`
}

// Recheck verdicts.
const (
	RecheckUnchanged   = "unchanged"
	RecheckChanged     = "changed"
	RecheckUnreachable = "unreachable"
)

// recheckJSON is the result of comparing a citation's excerpt with the live page.
type recheckJSON struct {
	Status      string     `json:"status"` // unchanged | changed | unreachable
	RetrievedAt *time.Time `json:"retrievedAt,omitempty"`
	CheckedAt   time.Time  `json:"checkedAt"`
	// Method says what was compared: "page" (open_web_page's text, re-extracted the same way) or
	// "excerpt" (each line of a search excerpt looked up in the live page).
	Method string `json:"method,omitempty"`
	// Similarity is the share of the excerpt's sentences or lines still found on the page (0–1).
	Similarity *float64 `json:"similarity,omitempty"`
	// Detail says in one sentence what changed, or why the page could not be reached.
	Detail string `json:"detail"`
	// Missing quotes (shortened) the first part of the excerpt no longer found on the page.
	Missing string `json:"missing,omitempty"`
}

// LivePage is a source's current text as Config.Fetch returns it, in each form the tools extract
// from a page at retrieval time, so that a recheck compares like with like.
type LivePage struct {
	// Text is what open_web_page returns for the URL now: the same fetcher, extraction and limits.
	Text string
	// Passages is the page as the local search renders its excerpts: one line per heading ("## …"),
	// list item, table row ("| … |") or paragraph.
	Passages string
	// Full is all visible text of the page, title included: where a search engine's snippet comes from.
	Full string
}

// handlePreview returns the text the model was given for citation n of a final answer, read from
// the one TOOL message that held the source (citedSource).
// With ?recheck=1 it also compares that text with the live page (only for the message's owner:
// anything else is 404 before any fetch happens).
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
	src, err := s.citedSource(r.Context(), m, *cit)
	if err != nil {
		return err
	}
	excerpt, truncated := cutUTF16(src.Excerpt, MaxExcerptUTF16)
	out := previewJSON{
		N: n, URL: cit.URL, Title: cit.Title, Tool: src.Tool, Excerpt: excerpt, Truncated: truncated,
		RetrievedAt: cit.RetrievedAt, Digest: cit.Digest,
		ExcerptHTML: markdown.RenderExcerpt(excerpt), Site: s.siteName(cit.URL),
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
		rc, err := s.recheck(r.Context(), src)
		if err != nil {
			return err
		}
		rc.RetrievedAt = out.RetrievedAt
		out.Recheck = &rc
		if rc.Status != RecheckUnreachable {
			changed := rc.Status == RecheckChanged
			out.Changed = &changed
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// citedSource finds the source of citation cit of answer m. A record that names the tool message
// (messageId) or the tool call (callId) that held it costs one more read: that message, parsed
// alone into a fresh registry. Sources are entered by URL and a message's first result with a URL
// is the one the run's registry took from it, so the excerpt is the one the model was given; the
// URL and, when the record has one, the digest must still match the record. A record written before
// citations named their message rebuilds the run's registry from its TOOL messages (run → messages
// index), exactly as the citation hook built it. A record that disagrees with the tool messages is
// not found: showing a different source's text would be worse than showing none.
func (s *Server) citedSource(ctx context.Context, m store.Message, cit citations.Citation) (citations.Source, error) {
	if cit.MessageID == 0 && cit.CallID == "" {
		return s.runSource(ctx, m, cit)
	}
	var (
		t   store.Message
		err error
	)
	if cit.MessageID != 0 {
		t, err = s.st.GetMessage(ctx, cit.MessageID)
	} else {
		t, err = s.st.GetToolResult(ctx, m.RunID, cit.CallID)
	}
	if errors.Is(err, store.ErrNotFound) {
		s.log.WarnContext(ctx, "preview: the citation's tool message is gone", "message", m.ID, "n", cit.N)
		return citations.Source{}, errNotFound()
	}
	if err != nil {
		return citations.Source{}, s.storeErr("get_tool_result", err)
	}
	if t.Role != store.RoleTool || t.RunID != m.RunID || t.SessionID != m.SessionID || (cit.CallID != "" && t.ToolCallID != cit.CallID) {
		s.log.WarnContext(ctx, "preview: the citation names a message that is not its run's tool result", "message", m.ID, "n", cit.N, "tool_message", t.ID)
		return citations.Source{}, errNotFound()
	}
	var reg citations.Registry
	reg.Add(citations.ToolResult{Tool: t.ToolName, CallID: t.ToolCallID, MessageID: t.ID, Content: t.Content, At: t.CreatedAt})
	for _, src := range reg.Sources() {
		if src.URL != cit.URL {
			continue
		}
		if cit.Digest != "" && citations.Digest(src.Excerpt) != cit.Digest {
			break
		}
		return src, nil
	}
	s.log.WarnContext(ctx, "preview: citation does not match its tool message", "message", m.ID, "n", cit.N, "tool_message", t.ID)
	return citations.Source{}, errNotFound()
}

// runSource finds citation cit's source in the registry rebuilt from all of the run's TOOL
// messages (records without messageId and callId).
func (s *Server) runSource(ctx context.Context, m store.Message, cit citations.Citation) (citations.Source, error) {
	// Only the answer's own run is read (run → messages index), never the rest of its session.
	runMsgs, err := s.st.ListRunMessages(ctx, m.RunID)
	if err != nil {
		return citations.Source{}, s.storeErr("list_run_messages", err)
	}
	var results []citations.ToolResult
	for _, t := range runMsgs {
		if t.Role == store.RoleTool && t.RunID == m.RunID && t.SessionID == m.SessionID {
			results = append(results, citations.ToolResult{Tool: t.ToolName, CallID: t.ToolCallID, MessageID: t.ID, Content: t.Content, At: t.CreatedAt})
		}
	}
	src, ok := citations.BuildRegistry(results).Lookup(cit.N)
	if !ok || src.URL != cit.URL {
		s.log.WarnContext(ctx, "preview: citation does not match the run's registry", "message", m.ID, "n", cit.N)
		return citations.Source{}, errNotFound()
	}
	return src, nil
}

// recheck fetches the source's live page and compares it with the excerpt the model was given,
// like with like: an open_web_page excerpt is open_web_page's own extraction of the page, so it is
// compared with the same extraction of the live page; a web_search excerpt is a passage (local
// corpus) or a search engine's snippet, made of lines and sentences taken from the page, so each
// of its pieces is looked up in the live page rendered the way passages are, and in its full text.
// Both sides are normalised alike (Unicode NFKC, case, and only letters and digits kept), so the
// light Markdown of passages ("## ", "- ", "| … |"), list numbers aside, and whitespace never count
// as a change.
func (s *Server) recheck(ctx context.Context, src citations.Source) (recheckJSON, error) {
	if s.cfg.Fetch == nil {
		return recheckJSON{}, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "live recheck is not available on this server"}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	live, err := s.cfg.Fetch(ctx, src.URL)
	checked := s.cfg.Now().UTC()
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			return recheckJSON{}, fmt.Errorf("recheck: %w", ctx.Err())
		}
		s.log.InfoContext(ctx, "preview recheck: source unreachable", "url", src.URL, "err", err)
		return recheckJSON{Status: RecheckUnreachable, CheckedAt: checked,
			Detail: "The page could not be fetched: " + strings.TrimPrefix(err.Error(), "fetch: ")}, nil
	}
	if src.Tool == citations.ToolOpenWebPage {
		return comparePage(src.Excerpt, live.Text, checked), nil
	}
	return compareExcerpt(src.Excerpt, live, checked), nil
}

// comparePage compares an open_web_page excerpt with the same extraction of the live page.
func comparePage(excerpt, liveText string, checked time.Time) recheckJSON {
	out := recheckJSON{Method: "page", CheckedAt: checked}
	if normalize(excerpt) == normalize(liveText) {
		out.Status, out.Detail = RecheckUnchanged, "The page's text is the same as when it was retrieved."
		out.Similarity = ptr(1.0)
		return out
	}
	out.Status = RecheckChanged
	// Sentences are matched whole (a sentence that grew or shrank is a changed sentence), in any
	// order.
	old, now := sentences(excerpt), sentences(liveText)
	gone, missing := missingPieces(old, sentenceSet(now))
	added, _ := missingPieces(now, sentenceSet(old))
	if len(old) > 0 {
		out.Similarity = ptr(roundShare(len(old)-gone, len(old)))
	}
	out.Missing = missing
	switch {
	case strings.TrimSpace(liveText) == "":
		out.Detail = "The page has no readable text any more."
	case gone == 0 && added == 0:
		out.Detail = "The page's text was rearranged; every sentence of the excerpt is still there."
	default:
		out.Detail = fmt.Sprintf("%d of %d sentences of the excerpt are no longer on the page; %d new sentences appear.", gone, len(old), added)
	}
	return out
}

// compareExcerpt looks up each piece (line, or part between ellipses) of a search excerpt in the
// live page: in its passage rendering and in its full visible text.
func compareExcerpt(excerpt string, live LivePage, checked time.Time) recheckJSON {
	out := recheckJSON{Method: "excerpt", CheckedAt: checked}
	pieces := snippetPieces(excerpt)
	if len(pieces) == 0 {
		out.Status, out.Detail = RecheckChanged, "The excerpt has no text that could be compared with the page."
		return out
	}
	hay := normalize(live.Passages) + "\x00" + normalize(live.Full)
	gone, missing := missingPieces(pieces, func(p string) bool { return strings.Contains(hay, p) })
	out.Similarity = ptr(roundShare(len(pieces)-gone, len(pieces)))
	if gone == 0 {
		out.Status, out.Detail = RecheckUnchanged, "Every line of the excerpt is still on the page."
		return out
	}
	out.Status, out.Missing = RecheckChanged, missing
	out.Detail = fmt.Sprintf("%d of %d lines of the excerpt are no longer on the page.", gone, len(pieces))
	return out
}

// sentenceSet is membership in a set of sentences, compared normalised.
func sentenceSet(ss []string) func(string) bool {
	set := make(map[string]bool, len(ss))
	for _, s := range ss {
		set[normalize(s)] = true
	}
	return func(p string) bool { return set[p] }
}

// missingPieces counts the pieces whose normalised text found rejects and returns the first of
// them, shortened for display.
func missingPieces(pieces []string, found func(normalized string) bool) (int, string) {
	gone, first := 0, ""
	for _, p := range pieces {
		if !found(normalize(p)) {
			if gone == 0 {
				first = shortText(p, 120)
			}
			gone++
		}
	}
	return gone, first
}

// snippetPieces splits an excerpt into its lines and, within lines, at the ellipses search
// engines put between the parts they quote; pieces with nothing comparable are dropped.
func snippetPieces(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, piece := range strings.FieldsFunc(line, func(r rune) bool { return r == '…' }) {
			for _, p := range strings.Split(piece, "...") {
				if normalize(p) != "" {
					out = append(out, strings.TrimSpace(p))
				}
			}
		}
	}
	return out
}

// sentences splits a page's text into its lines and, within lines, into sentences (textseg, the one
// sentence splitter); pieces with nothing comparable are dropped.
func sentences(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, p := range textseg.Sentences(line) {
			if normalize(p) != "" {
				out = append(out, strings.TrimSpace(p))
			}
		}
	}
	return out
}

// normalize keeps only the letters and digits of s, case-folded after NFKC (full-width forms
// become ASCII), so punctuation, whitespace and Markdown decoration never decide a comparison.
func normalize(s string) string {
	s = norm.NFKC.String(s)
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

func roundShare(part, whole int) float64 {
	return math.Round(float64(part)/float64(whole)*100) / 100
}

func ptr[T any](v T) *T { return &v }

// shortText collapses whitespace and cuts s to at most n runes.
func shortText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
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

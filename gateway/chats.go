package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// Chat management: rename, delete, search, and the copy text of an answer.

// maxTitleRunes bounds a chat title set by rename.
const maxTitleRunes = 120

// handleRenameSession is PATCH /api/sessions/{id} {"title"}. The user's other tabs learn the new
// title from a session.updated frame, on whichever replica they are connected.
func (s *Server) handleRenameSession(w http.ResponseWriter, r *http.Request, u store.User) error {
	sess, err := s.ownedSession(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	var req struct {
		Title string `json:"title"`
	}
	if err := decodeBody(w, r, 4<<10, &req); err != nil {
		return err
	}
	title, err := cleanText(req.Title, maxTitleRunes, false)
	if err != nil {
		return errBadRequest("title: " + err.Error())
	}
	if title == "" {
		return errBadRequest("title: empty; a chat needs a title")
	}
	if err := s.st.SetSessionTitle(r.Context(), sess.ID, title); err != nil {
		return s.storeErr("set_session_title", err)
	}
	sess.Title = title
	sj := toSessionJSON(sess)
	s.toUserEverywhere(u.ID, &wsFrame{Type: "session.updated", SessionID: sess.ID, Session: &sj})
	writeJSON(w, http.StatusOK, map[string]any{"session": sj})
	return nil
}

// handleDeleteSession is DELETE /api/sessions/{id}: the chat, its messages and runs go, and so do
// its share links (their pages answer 404 from then on). A run in progress is cancelled first. The
// user's tabs learn it from a session.deleted frame, on whichever replica they are connected.
func (s *Server) handleDeleteSession(w http.ResponseWriter, r *http.Request, u store.User) error {
	sess, err := s.ownedSession(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	// A running answer would otherwise keep writing into a chat that no longer exists; its writes
	// fail from the deletion on, and the run ends FAILED or CANCELLED without a trace in any view.
	// The hub's agent asks the other replicas too when the run executes elsewhere.
	s.hub.ag.Cancel(sess.ID)
	revoked, err := s.st.DeleteChat(r.Context(), sess.ID, u.ID)
	if err != nil {
		return s.storeErr("delete_chat", err)
	}
	// The owner cache would still route and authorise the deleted id; "" is the cache's "no
	// desktop owner", which every later check refuses.
	s.hub.owners.set(sess.ID, "")
	s.log.InfoContext(r.Context(), "chat deleted", "session", sess.ID, "user", u.ID, "shares_revoked", revoked)
	s.toUserEverywhere(u.ID, &wsFrame{Type: "session.deleted", SessionID: sess.ID})
	writeJSON(w, http.StatusOK, map[string]any{"sessionId": sess.ID, "revokedShares": revoked})
	return nil
}

// searchMessageJSON is one matching message of a search result, as a snippet of what the
// conversation shows (markers removed, the link rule applied), never of the raw record.
type searchMessageJSON struct {
	ID        uint64     `json:"id"`
	Role      store.Role `json:"role"`
	Snippet   string     `json:"snippet"`
	CreatedAt time.Time  `json:"createdAt"`
}

type searchResultJSON struct {
	Session    sessionJSON         `json:"session"`
	TitleMatch bool                `json:"titleMatch"`
	Messages   []searchMessageJSON `json:"messages"`
}

// snippetRunes is the length of a search snippet.
const snippetRunes = 120

// handleSearch is GET /api/search?q=…[&limit=n]: the caller's chats whose title or conversation
// contains every word of q. The store bounds the work (a result limit and a scan budget of message
// index entries, newest chats first); "truncated" tells the client the list may not be complete.
func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request, u store.User) error {
	q := r.URL.Query().Get("q")
	terms := store.SearchTerms(q)
	if len(terms) == 0 {
		return errBadRequest("q: give at least one word to search for")
	}
	if len(q) > store.MaxSearchQueryBytes {
		return errBadRequest("q: at most " + strconv.Itoa(store.MaxSearchQueryBytes) + " bytes")
	}
	limit := store.DefaultSearchLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxSearchLimit {
			return errBadRequest("limit: a number from 1 to " + strconv.Itoa(store.MaxSearchLimit))
		}
		limit = n
	}
	res, err := s.st.SearchSessions(r.Context(), u.ID, q, store.SearchOptions{Limit: limit})
	if err != nil {
		return s.storeErr("search_sessions", err)
	}
	out := make([]searchResultJSON, 0, len(res.Hits))
	for _, h := range res.Hits {
		rj := searchResultJSON{Session: toSessionJSON(h.Session), TitleMatch: h.TitleMatch, Messages: []searchMessageJSON{}}
		for _, m := range h.Messages {
			text := m.Content
			if m.Role == store.RoleAssistant {
				// What the conversation shows: a match inside a hidden URL or a marker is no match.
				cits := citations.FromMetadata(m.Metadata)
				text, _ = citations.SafeText(m.Content, allowFunc(m.Metadata, cits))
			}
			if !store.MatchTerms(text, terms) {
				continue
			}
			rj.Messages = append(rj.Messages, searchMessageJSON{ID: m.ID, Role: m.Role, Snippet: snippet(text, terms[0], snippetRunes), CreatedAt: m.CreatedAt})
		}
		if rj.TitleMatch || len(rj.Messages) > 0 {
			out = append(out, rj)
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"query": q, "results": out, "truncated": res.Truncated})
	return nil
}

// snippet is about width characters of text around the first occurrence of term (lower case),
// on one line, with "…" where it was cut.
func snippet(text, term string, width int) string {
	rs := []rune(strings.Join(strings.Fields(text), " "))
	lower := make([]rune, len(rs))
	for i, r := range rs {
		lower[i] = unicode.ToLower(r)
	}
	at := 0
	if ls := string(lower); term != "" {
		if bi := strings.Index(ls, term); bi > 0 {
			at = utf8.RuneCountInString(ls[:bi])
		}
	}
	if len(rs) <= width {
		return string(rs)
	}
	start := max(0, at-width/3)
	end := min(len(rs), start+width)
	start = max(0, end-width)
	out := string(rs[start:end])
	if start > 0 {
		out = "…" + out
	}
	if end < len(rs) {
		out += "…"
	}
	return out
}

// handleMessageText is GET /api/messages/{id}/text: an answer as the copy button puts it on the
// clipboard (copyText), built from the stored record.
func (s *Server) handleMessageText(w http.ResponseWriter, r *http.Request, u store.User) error {
	m, err := s.ownedMessage(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	text := m.Content
	if m.Role == store.RoleAssistant {
		if !isAnswer(m) {
			return errNotFound()
		}
		text = copyText(m, langParam(r))
	} else if m.Role != store.RoleUser {
		return errNotFound()
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"messageId": m.ID, "text": text})
	return nil
}

// langParam is the language a text for the caller is written in: ?lang=en|zh when given (the page
// passes its own), else the browser's.
func langParam(r *http.Request) string {
	switch r.URL.Query().Get("lang") {
	case "en":
		return "en"
	case "zh":
		return "zh"
	}
	return langOf(r)
}

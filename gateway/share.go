package gateway

import (
	"errors"
	"html/template"
	"net/http"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/gateway/web"
	"github.com/citegate/citegate/store"
)

// shareHeaders keep share pages out of search engines and keep the token out of Referer headers
// sent to the cited sites.
func shareHeaders(w http.ResponseWriter) {
	w.Header().Set("X-Robots-Tag", "noindex, nofollow")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
}

// handleSharePage renders a read-only snapshot for anyone holding the token. Unknown and revoked
// tokens get the same 404 page. The conversation is read and sent a page of messages at a time
// (messagePages, as the JSONL export does), so a share of any length costs one page of memory and
// no read transaction stays open while a slow reader downloads it. The first page is read before
// anything is sent, so a failing store still gets a proper error page.
func (s *Server) handleSharePage(w http.ResponseWriter, r *http.Request) {
	shareHeaders(w)
	lang := s.viewerLang(r)
	tok := r.PathValue("token")
	sh, sess, err := s.shareOf(r, tok)
	if err == nil {
		var first []store.Message
		next := s.messagePages(r.Context(), sess.ID, sh.Watermark)
		if first, err = next(); err == nil {
			s.streamSharePage(w, r, lang, tok, sh, sess, first, next)
			return
		}
		if errors.Is(err, store.ErrNotFound) {
			err = errShareGone // the chat was deleted a moment ago
		} else {
			err = s.storeErr("list_messages_after", err)
		}
	}
	if errors.Is(err, errShareGone) {
		s.notFoundPage(w, r, lang)
		return
	}
	s.writeError(w, r, err)
}

// streamSharePage writes the page: first, then every page next returns until an empty one. A view is
// counted once every message was written (share_views.go says what counts).
func (s *Server) streamSharePage(w http.ResponseWriter, r *http.Request, lang, tok string, sh store.Share, sess store.Session, first []store.Message, next func() ([]store.Message, error)) {
	isView := s.countsAsView(r, sh.OwnerID)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	page, err := web.StartShare(w, web.ShareData{
		Title:     sess.Title,
		Lang:      lang,
		ExportURL: "/s/" + tok + "/export.jsonl",
		CreatedAt: sh.CreatedAt,
	})
	if err != nil {
		s.log.WarnContext(r.Context(), "render share", "err", err)
		return
	}
	rc := http.NewResponseController(w)
	for msgs := first; len(msgs) > 0; {
		for _, m := range msgs {
			if !visible(m) {
				continue
			}
			cits := citations.FromMetadata(m.Metadata)
			err := page.Message(web.MessageView{
				ID:        m.ID,
				Role:      string(m.Role),
				HTML:      template.HTML(s.renderMessage(m, cits, lang, false)), //nolint:gosec // markdown.Render output is sanitised
				CreatedAt: m.CreatedAt,
			})
			if err != nil {
				s.log.DebugContext(r.Context(), "share page aborted", "session", sess.ID, "err", err)
				return
			}
		}
		if err := page.Flush(); err != nil {
			s.log.DebugContext(r.Context(), "share page aborted", "session", sess.ID, "err", err)
			return
		}
		_ = rc.Flush() // not every writer flushes; the page still arrives at the end
		if msgs, err = next(); err != nil {
			s.storeErr("list_messages_after", err)
			s.log.ErrorContext(r.Context(), "share page cut short by a store error", "session", sess.ID, "err", err)
			return
		}
	}
	// Every message was sent: this is a view. It is counted before the end of the page goes out, so
	// a reader who has the whole page is always already counted.
	if isView {
		s.views.record(sh.TokenHash, s.cfg.Now())
	}
	if err := page.End(); err != nil {
		s.log.DebugContext(r.Context(), "share page aborted", "session", sess.ID, "err", err)
	}
}

// shareOf loads a live share and its session; unknown, revoked and orphaned links are errShareGone.
func (s *Server) shareOf(r *http.Request, tok string) (store.Share, store.Session, error) {
	if tok == "" || len(tok) > maxTokenLen {
		return store.Share{}, store.Session{}, errShareGone
	}
	sh, err := s.st.GetShare(r.Context(), tok)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return sh, store.Session{}, errShareGone
		}
		return sh, store.Session{}, s.storeErr("get_share", err)
	}
	sess, err := s.st.GetSession(r.Context(), sh.SessionID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return sh, sess, errShareGone
		}
		return sh, sess, s.storeErr("get_session", err)
	}
	return sh, sess, nil
}

func (s *Server) notFoundPage(w http.ResponseWriter, r *http.Request, lang string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	if err := web.RenderNotFound(w, lang); err != nil {
		s.log.WarnContext(r.Context(), "render not found", "err", err)
	}
}

// handleShareExport streams the share's snapshot as JSONL: the conversation as the share page shows
// it (USER and final ASSISTANT messages with their verified citations), never the tool record. It
// pages through the session up to the watermark like the owner's export.
func (s *Server) handleShareExport(w http.ResponseWriter, r *http.Request) {
	shareHeaders(w)
	sh, sess, err := s.shareOf(r, r.PathValue("token"))
	if err != nil {
		if errors.Is(err, errShareGone) {
			err = errNotFound()
		}
		s.writeError(w, r, err)
		return
	}
	next := s.messagePages(r.Context(), sess.ID, sh.Watermark)
	first, err := next()
	if err != nil {
		s.writeError(w, r, s.storeErr("list_messages_after", err))
		return
	}
	s.streamJSONL(w, r, sess, first, next, publicLine)
}

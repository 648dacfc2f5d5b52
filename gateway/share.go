package gateway

import (
	"errors"
	"html/template"
	"net/http"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/gateway/web"
)

// shareHeaders keep share pages out of search engines and keep the token out of Referer headers
// sent to the cited sites.
func shareHeaders(w http.ResponseWriter) {
	w.Header().Set("X-Robots-Tag", "noindex, nofollow")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
}

// handleSharePage renders a read-only snapshot for anyone holding the token. Unknown and revoked
// tokens get the same 404 page.
func (s *Server) handleSharePage(w http.ResponseWriter, r *http.Request) {
	shareHeaders(w)
	lang := s.viewerLang(r)
	tok := r.PathValue("token")
	sh, sess, msgs, err := s.shareSnapshot(r, tok)
	if err != nil {
		if errors.Is(err, errShareGone) {
			s.notFoundPage(w, r, lang)
			return
		}
		s.writeError(w, r, err)
		return
	}
	views := make([]web.MessageView, 0, len(msgs))
	for _, m := range msgs {
		if !visible(m) {
			continue
		}
		cits := citations.FromMetadata(m.Metadata)
		views = append(views, web.MessageView{
			ID:        m.ID,
			Role:      string(m.Role),
			HTML:      template.HTML(s.renderMessage(m, cits, lang, false)), //nolint:gosec // markdown.Render output is sanitised
			CreatedAt: m.CreatedAt,
		})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	err = web.RenderShare(w, web.ShareData{
		Title:     sess.Title,
		Lang:      lang,
		ExportURL: "/s/" + tok + "/export.jsonl",
		CreatedAt: sh.CreatedAt,
		Messages:  views,
	})
	if err != nil {
		s.log.WarnContext(r.Context(), "render share", "err", err)
	}
}

func (s *Server) notFoundPage(w http.ResponseWriter, r *http.Request, lang string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	if err := web.RenderNotFound(w, lang); err != nil {
		s.log.WarnContext(r.Context(), "render not found", "err", err)
	}
}

// handleShareExport streams the share's snapshot as JSONL: the conversation as the share page shows
// it (USER and final ASSISTANT messages with their verified citations), never the tool record.
func (s *Server) handleShareExport(w http.ResponseWriter, r *http.Request) {
	shareHeaders(w)
	_, sess, msgs, err := s.shareSnapshot(r, r.PathValue("token"))
	if err != nil {
		if errors.Is(err, errShareGone) {
			s.writeError(w, r, errNotFound())
			return
		}
		s.writeError(w, r, err)
		return
	}
	s.streamJSONL(w, r, sess, msgs, noMorePages, publicLine)
}

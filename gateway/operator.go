package gateway

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/gateway/web"
	"github.com/citegate/citegate/store"
)

// The operator console: server-rendered pages (no script) where operators review what users
// shared. It reaches conversations only through live shares and only up to each share's watermark
// (the same snapshot the share page shows), so nothing unshared can be read here. Everyone who is not
// an operator — a signed-out visitor included — gets the same 404 page on every route below, as if
// the console did not exist. Every action on someone else's share, and every export of the log, is
// written to the audit log before its effect is shown.
//
//	GET  /operator                     every live share with its review figures
//	GET  /operator?filter=dropped      shared answers whose citation markers were dropped
//	GET  /operator?filter=hidden       shared answers whose unverified links were hidden
//	GET  /operator/shares/{id}         one share, read-only, rendered as the share page (audited)
//	POST /operator/shares/{id}/revoke  revoke it (same-origin check for cookies; audited)
//	GET  /operator/audit               the audit log, newest first (?before=ID pages back)
//	GET  /operator/audit.jsonl|.csv    the whole log as a download (audited)

// operatorRoutes mounts the console.
func (s *Server) operatorRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /operator", s.operator(s.handleOperatorConsole))
	mux.HandleFunc("GET /operator/{$}", s.operator(s.handleOperatorConsole))
	mux.HandleFunc("GET /operator/shares/{id}", s.operator(s.handleOperatorShare))
	mux.HandleFunc("POST /operator/shares/{id}/revoke", s.operator(s.handleOperatorRevoke))
	mux.HandleFunc("GET /operator/audit", s.operator(s.handleOperatorAudit))
	mux.HandleFunc("GET /operator/audit.jsonl", s.operator(s.handleOperatorAuditExport))
	mux.HandleFunc("GET /operator/audit.csv", s.operator(s.handleOperatorAuditExport))
	// Any other path or method under /operator is the same not-found page. Without these method-less
	// patterns the mux would answer a wrong method on a console path with 405, telling anyone that
	// the path exists.
	notFound := s.operator(func(http.ResponseWriter, *http.Request, store.User) error { return errNotFound() })
	mux.HandleFunc("/operator", notFound)
	mux.HandleFunc("/operator/", notFound)
}

// operatorHeaders keep console pages out of caches, search engines and Referer headers.
func operatorHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Robots-Tag", "noindex, nofollow")
	h.Set("Referrer-Policy", "no-referrer")
}

// operator wraps a console handler: the caller must be an operator (anyone else gets the not-found
// page, exactly as for a path that does not exist), and a form post authenticated by the cookie must
// come from our own origin. A not-found error from the handler is the same page.
func (s *Server) operator(h func(w http.ResponseWriter, r *http.Request, u store.User) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		operatorHeaders(w)
		lang := langOf(r)
		u, fromCookie, err := s.authenticate(r)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Code == CodeUnauthorized {
				s.notFoundPage(w, r, lang)
				return
			}
			s.writeError(w, r, err)
			return
		}
		r = withUserLang(r, u)
		lang = langOf(r)
		if !u.Operator {
			s.notFoundPage(w, r, lang)
			return
		}
		if fromCookie && stateChanging(r.Method) && !s.sameOrigin(r) {
			s.log.WarnContext(r.Context(), "cross-origin operator request refused", "method", r.Method, "path", r.URL.Path,
				"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
			s.writeError(w, r, errCrossOrigin())
			return
		}
		if err := h(w, r, u); err != nil {
			var e *Error
			if errors.As(err, &e) && e.Code == CodeNotFound {
				s.notFoundPage(w, r, lang)
				return
			}
			s.writeError(w, r, err)
		}
	}
}

func actorOf(u store.User) store.Actor { return store.Actor{ID: u.ID, Name: u.Name} }

func (s *Server) handleOperatorConsole(w http.ResponseWriter, r *http.Request, u store.User) error {
	lang := langOf(r)
	page := web.OperatorPage{Lang: lang, UserName: u.Name, Tab: "shares"}
	switch f := r.URL.Query().Get("filter"); f {
	case "", "all":
	case "dropped", "hidden":
		page.Tab = f
	default:
		return errBadRequest("filter must be dropped or hidden")
	}
	if r.URL.Query().Get("done") == "revoked" {
		page.Notice = web.Translate(lang, "op.revoked")
	}
	reviews, err := s.reviewShares(r.Context())
	if err != nil {
		return err
	}
	for _, rv := range reviews {
		e := rv.share
		page.Shares = append(page.Shares, web.OperatorShareRow{
			ID: e.ID(), Title: e.Session.Title, Owner: e.Owner.Name, CreatedAt: e.CreatedAt, Watermark: e.Watermark,
			Messages: rv.messages, Kept: rv.kept, Dropped: rv.dropped, Hidden: rv.hidden, Up: rv.up, Down: rv.down,
			ViewURL: operatorShareURL(e.ID()), RevokeURL: operatorShareURL(e.ID()) + "/revoke", Live: e.Session.ID != "",
		})
		for _, a := range rv.answers {
			if (page.Tab == "dropped" && a.dropped > 0) || (page.Tab == "hidden" && a.hidden > 0) {
				page.Answers = append(page.Answers, web.OperatorAnswerRow{
					Title: e.Session.Title, Owner: e.Owner.Name, Question: a.question, At: a.at,
					Dropped: a.dropped, Hidden: a.hidden,
					URL: operatorShareURL(e.ID()) + "#msg-" + strconv.FormatUint(a.id, 10),
				})
			}
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := web.RenderOperator(w, page); err != nil {
		s.log.WarnContext(r.Context(), "render operator console", "err", err)
	}
	return nil
}

func operatorShareURL(id string) string { return "/operator/shares/" + url.PathEscape(id) }

// operatorShareID reads and checks the {id} of a share route; anything but a share id is not found.
func operatorShareID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !shareIDRE.MatchString(id) {
		return "", errNotFound()
	}
	return id, nil
}

// handleOperatorShare shows one share read-only, as the share page renders it, with each answer's
// review figures. The view is audited before anything is rendered: a view the log cannot record is
// not shown. Like the share page it reads the conversation a page at a time up to the share's
// watermark and writes each page as it goes (shareContent), so a share of any length costs one
// page of memory; each answer's marker counts come from its own run record.
func (s *Server) handleOperatorShare(w http.ResponseWriter, r *http.Request, u store.User) error {
	lang := langOf(r)
	id, err := operatorShareID(r)
	if err != nil {
		return err
	}
	sh, err := s.st.GetShareByID(r.Context(), id)
	if err != nil {
		return s.storeErr("get_share_by_id", err)
	}
	sess, first, next, err := s.shareContent(r.Context(), sh)
	if err != nil {
		return err
	}
	owner, err := s.st.GetUser(r.Context(), sh.OwnerID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return s.storeErr("get_user", err)
	}
	if _, err := s.st.AppendAudit(r.Context(), store.AuditEntry{
		ActorID: u.ID, Actor: u.Name, Action: store.AuditShareView, Target: id, Detail: shareDetail(sess, owner),
	}); err != nil {
		return s.storeErr("append_audit", err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	page, err := web.StartOperatorShare(w, web.OperatorShareView{
		Lang: lang, UserName: u.Name, ID: id, Title: sess.Title, Owner: owner.Name,
		RevokeURL: operatorShareURL(id) + "/revoke", CreatedAt: sh.CreatedAt, Watermark: sh.Watermark,
	})
	if err != nil {
		s.log.WarnContext(r.Context(), "render operator share", "err", err)
		return nil
	}
	rc := http.NewResponseController(w)
	for msgs := first; len(msgs) > 0; {
		for _, m := range msgs {
			if !visible(m) {
				continue
			}
			cits := citations.FromMetadata(m.Metadata)
			om := web.OperatorMessage{MessageView: web.MessageView{
				ID: m.ID, Role: string(m.Role), CreatedAt: m.CreatedAt,
				HTML: template.HTML(s.renderMessage(m, cits, lang, false)), //nolint:gosec // markdown.Render output is sanitised
			}}
			if m.Role == store.RoleAssistant {
				rv := reviewAnswer(m, s.finalRun(r.Context(), m))
				om.Kept, om.Dropped, om.Hidden, om.Up, om.Down, om.HasRun = rv.kept, rv.dropped, rv.hidden, rv.up, rv.down, rv.hasRun
			}
			if err := page.Message(om); err != nil {
				s.log.DebugContext(r.Context(), "operator share view aborted", "share", id, "err", err)
				return nil
			}
		}
		if err := page.Flush(); err != nil {
			s.log.DebugContext(r.Context(), "operator share view aborted", "share", id, "err", err)
			return nil
		}
		_ = rc.Flush() // not every writer flushes; the page still arrives at the end
		if msgs, err = next(); err != nil {
			s.storeErr("list_messages_after", err)
			s.log.ErrorContext(r.Context(), "operator share view cut short by a store error", "share", id, "err", err)
			return nil
		}
	}
	if err := page.End(); err != nil {
		s.log.DebugContext(r.Context(), "operator share view aborted", "share", id, "err", err)
	}
	return nil
}

// shareDetail is the audit log's note about a share: its chat and owner, so the log reads on its
// own after the share is gone.
func shareDetail(sess store.Session, owner store.User) string {
	title := []rune(sess.Title)
	if len(title) > 120 {
		title = append(title[:120], '…')
	}
	return fmt.Sprintf("chat %q of %s", string(title), owner.Name)
}

// handleOperatorRevoke revokes any share; the revocation and its audit entry are one transaction.
func (s *Server) handleOperatorRevoke(w http.ResponseWriter, r *http.Request, u store.User) error {
	id, err := operatorShareID(r)
	if err != nil {
		return err
	}
	if err := s.operatorRevoke(r.Context(), u, id); err != nil {
		return s.storeErr("revoke_share_as_operator", err)
	}
	http.Redirect(w, r, "/operator?done=revoked", http.StatusSeeOther)
	return nil
}

// operatorRevoke revokes the share with id on behalf of operator u and records it. Store errors are
// returned as they are (ErrNotFound for an unknown or revoked id).
func (s *Server) operatorRevoke(ctx context.Context, u store.User, id string) error {
	sh, err := s.st.GetShareByID(ctx, id)
	if err != nil {
		return err
	}
	sess, err := s.st.GetSession(ctx, sh.SessionID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	owner, err := s.st.GetUser(ctx, sh.OwnerID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if _, err := s.st.RevokeShareAsOperator(ctx, id, store.AuditEntry{
		ActorID: u.ID, Actor: u.Name, Detail: shareDetail(sess, owner),
	}); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "share revoked by an operator", "operator", u.ID, "owner", sh.OwnerID, "session", sh.SessionID)
	return nil
}

// operatorShares adds every other user's live share to an operator's own list (own), newest first.
func (s *Server) operatorShares(ctx context.Context, u store.User, own []shareListEntry) ([]shareListEntry, error) {
	all, err := s.st.ListAllShares(ctx)
	if err != nil {
		return nil, s.storeErr("list_all_shares", err)
	}
	byID := make(map[string]shareListEntry, len(own))
	for _, e := range own {
		byID[e.ID] = e
	}
	out := make([]shareListEntry, 0, len(all))
	for _, e := range all {
		if mine, ok := byID[e.ID()]; ok {
			out = append(out, mine)
			continue
		}
		out = append(out, shareListEntry{
			shareJSON:   s.toShareJSON("", e.Share),
			Title:       e.Session.Title,
			Live:        e.Session.ID != "",
			Owner:       e.Owner.Name,
			OperatorURL: s.cfg.PublicURL + operatorShareURL(e.ID()),
		})
	}
	return out, nil
}

package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// messageJSON is one message as the desktop view sees it (REST history and session.history).
type messageJSON struct {
	ID          uint64               `json:"id"`
	Role        store.Role           `json:"role"`
	Content     string               `json:"content"`
	HTML        string               `json:"html"`
	Citations   []citations.Citation `json:"citations"`
	CreatedAt   time.Time            `json:"createdAt"`
	Interrupted bool                 `json:"interrupted,omitempty"`
	// Feedback is the owner's vote on an answer; RegenerateOf and EditOf say what a USER message
	// is (a new answer to an earlier question, an edited question); see actions.go.
	Feedback     *feedbackJSON `json:"feedback,omitempty"`
	RegenerateOf uint64        `json:"regenerateOf,omitempty"`
	EditOf       uint64        `json:"editOf,omitempty"`
	// Tools are the tool calls of the answer's run (final answers only; see pageJSON and
	// historyStream).
	Tools []toolLineJSON `json:"tools,omitempty"`
}

type sessionJSON struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Channel   string    `json:"channel"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func toSessionJSON(s store.Session) sessionJSON {
	return sessionJSON{ID: s.ID, Title: s.Title, Channel: s.Channel, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// visible reports whether m belongs in a conversation view: USER messages and final ASSISTANT
// messages. Tool calls and tool results are the record (export), not the conversation.
func visible(m store.Message) bool {
	switch m.Role {
	case store.RoleUser:
		return true
	case store.RoleAssistant:
		return len(m.ToolCalls) == 0
	}
	return false
}

// interrupted reads metadata.interrupted; malformed metadata counts as not interrupted.
func interrupted(metadata []byte) bool {
	if len(metadata) == 0 {
		return false
	}
	var doc struct {
		Interrupted bool `json:"interrupted"`
	}
	return json.Unmarshal(metadata, &doc) == nil && doc.Interrupted
}

func anchorFor(id uint64) string { return "m" + strconv.FormatUint(id, 10) }

// toMessageJSON is m as the desktop view shows it, its HTML from the render cache.
func (s *Server) toMessageJSON(m store.Message, lang string) messageJSON {
	cits := citations.FromMetadata(m.Metadata)
	if cits == nil {
		cits = []citations.Citation{}
	}
	mj := messageJSON{
		ID:          m.ID,
		Role:        m.Role,
		Content:     m.Content,
		HTML:        s.renderMessage(m, cits, lang, true),
		Citations:   cits,
		CreatedAt:   m.CreatedAt,
		Interrupted: m.Role == store.RoleAssistant && interrupted(m.Metadata),
	}
	addActionFields(&mj, m)
	return mj
}

// ownedSession loads a session of u; anything else (missing or someone else's) is the same 404.
func (s *Server) ownedSession(r *http.Request, u store.User, id string) (store.Session, error) {
	if id == "" || len(id) > 128 {
		return store.Session{}, errNotFound()
	}
	sess, err := s.st.GetSession(r.Context(), id)
	if err != nil {
		return store.Session{}, s.storeErr("get_session", err)
	}
	if sess.UserID != u.ID {
		return store.Session{}, errNotFound()
	}
	return sess, nil
}

func (s *Server) handleMe(w http.ResponseWriter, r *http.Request, u store.User) error {
	// operator tells the desktop view whether to offer the operator console.
	writeJSON(w, http.StatusOK, map[string]any{"id": u.ID, "name": u.Name, "model": s.ag.ModelName(), "operator": u.Operator})
	return nil
}

func (s *Server) handleSessions(w http.ResponseWriter, r *http.Request, u store.User) error {
	list, err := s.st.ListSessions(r.Context(), u.ID)
	if err != nil {
		return s.storeErr("list_sessions", err)
	}
	out := make([]sessionJSON, 0, len(list))
	for _, sess := range list {
		out = append(out, toSessionJSON(sess))
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
	return nil
}

// shareJSON is a share link as its owner sees it (the answer to a share request and one entry of
// GET /api/shares). ID names the link in lists and revocations; URL and Token are empty for a
// link created before tokens were kept (it can still be revoked by ID).
type shareJSON struct {
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	Watermark uint64    `json:"watermark"`
	ID        string    `json:"id"`
	SessionID string    `json:"sessionId"`
	CreatedAt time.Time `json:"createdAt"`

	shareStatsJSON // what the link covers and its views (share_api.go)
}

// shareListEntry adds what the "shared links" view shows beside each link.
type shareListEntry struct {
	shareJSON
	// Title is the chat's title; "" when the chat is gone (the link then opens the not-found page).
	Title string `json:"title"`
	// Live is false when the shared chat no longer exists.
	Live bool `json:"live"`
	// Own is true for the caller's own links; false only in an operator's list of every share.
	Own bool `json:"own"`
	// Owner is the name of the user who shared it.
	Owner string `json:"owner"`
	// OperatorURL is where an operator opens someone else's share (the console; audited).
	OperatorURL string `json:"operatorUrl,omitempty"`
}

func (s *Server) shareURL(tok string) string {
	if tok == "" {
		return ""
	}
	return s.cfg.PublicURL + "/s/" + tok
}

func (s *Server) toShareJSON(tok string, sh store.Share) shareJSON {
	return shareJSON{Token: tok, URL: s.shareURL(tok), Watermark: sh.Watermark, ID: sh.TokenHash,
		SessionID: sh.SessionID, CreatedAt: sh.CreatedAt, shareStatsJSON: statsJSON(sh.ShareStats)}
}

// handleCreateShare shares a chat as it is now. Sharing the same chat again while nothing was added
// hands back the live link (200) instead of minting another; once the chat has grown past the
// link's watermark a new link is created (201) and both stay listed, because the old link is a
// snapshot someone may already hold and only its owner should decide to revoke it.
func (s *Server) handleCreateShare(w http.ResponseWriter, r *http.Request, u store.User) error {
	sess, err := s.ownedSession(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	wm, err := s.st.LastMessageID(r.Context(), sess.ID)
	if err != nil {
		return s.storeErr("last_message_id", err)
	}
	if wm == 0 {
		return errBadRequest("the session has no messages to share yet")
	}
	tok, sh, created, err := s.st.ShareSession(r.Context(), sess.ID, u.ID, wm)
	if err != nil {
		return s.storeErr("create_share", err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.log.InfoContext(r.Context(), "share created", "session", sess.ID, "user", u.ID, "watermark", sh.Watermark)
	}
	writeJSON(w, status, s.toShareJSON(tok, sh))
	return nil
}

// handleListShares lists the caller's live share links, newest first. An operator gets every live
// share (DESIGN §5) unless ?scope=own asks for their own only; other users' entries carry their
// owner and the console address instead of a token, since an operator opens them through the
// console, which audits the view (operatorShares).
func (s *Server) handleListShares(w http.ResponseWriter, r *http.Request, u store.User) error {
	s.flushViews(r.Context())
	list, err := s.st.ListShares(r.Context(), u.ID)
	if err != nil {
		return s.storeErr("list_shares", err)
	}
	out := make([]shareListEntry, 0, len(list))
	for _, e := range list {
		out = append(out, shareListEntry{
			shareJSON: s.toShareJSON(e.Token, e.Share),
			Title:     e.Session.Title,
			Live:      e.Session.ID != "",
			Own:       true,
			Owner:     u.Name,
		})
	}
	if u.Operator && r.URL.Query().Get("scope") != "own" {
		if out, err = s.operatorShares(r.Context(), u, out); err != nil {
			return err
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"shares": out})
	return nil
}

// shareIDRE matches a share id (the hex sha256 of its token). Tokens are 43 base64url characters,
// so the two never collide.
var shareIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// handleRevokeShare revokes a link named by its token or by its id. Anything not the caller's is
// the same 404 as a missing link, except for an operator naming a share by its id: that revokes
// it whoever owns it, recorded in the audit log as the console's revocation is.
func (s *Server) handleRevokeShare(w http.ResponseWriter, r *http.Request, u store.User) error {
	tok := r.PathValue("token")
	if tok == "" || len(tok) > maxTokenLen {
		return errNotFound()
	}
	var err error
	if shareIDRE.MatchString(tok) {
		err = s.st.RevokeShareID(r.Context(), tok, u.ID)
		if u.Operator && errors.Is(err, store.ErrNotFound) {
			err = s.operatorRevoke(r.Context(), u, tok)
		}
	} else {
		err = s.st.RevokeShare(r.Context(), tok, u.ID)
	}
	if err != nil {
		return s.storeErr("revoke_share", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// parseID parses a positive decimal message id; anything else is not found (ids are not guessable
// input worth a distinct error).
func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, errNotFound()
	}
	return id, nil
}

// ownedMessage loads message id if it belongs to one of u's sessions.
func (s *Server) ownedMessage(r *http.Request, u store.User, rawID string) (store.Message, error) {
	id, err := parseID(rawID)
	if err != nil {
		return store.Message{}, err
	}
	m, err := s.st.GetMessage(r.Context(), id)
	if err != nil {
		return store.Message{}, s.storeErr("get_message", err)
	}
	if _, err := s.ownedSession(r, u, m.SessionID); err != nil {
		return store.Message{}, err
	}
	return m, nil
}

var errShareGone = errors.New("share not found")

func formatBytes(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KB", (n+512)>>10)
	}
	return fmt.Sprintf("%d B", n)
}

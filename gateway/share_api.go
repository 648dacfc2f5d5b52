package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/citegate/citegate/store"
)

// Share management beyond create/list/revoke (api.go):
//
//	GET   /api/sessions/{id}/shares   the caller's live links of one chat, newest first, and whether
//	                                  the chat has grown past each (the "existing link" offer)
//	PATCH /api/shares/{token}         {"watermark":"latest"}: the same link now covers the chat up
//	                                  to its newest message ("update to include newer messages")
//
// Semantics of the offer. Sharing a chat that already has a live link shows that link first,
// with what it covers. When the chat has grown since, the owner chooses: "update" moves that same
// link forward (whoever already holds it sees the newer messages too; nothing is ever removed from
// it), "keep" leaves it as it is. POST /api/sessions/{id}/shares keeps its old meaning for API
// clients: the live link at the chat's current watermark (200), else a new link there (201); after
// an update that is the updated link.

// shareStatsJSON is what a link covers and how often it was viewed, as the API shows it.
type shareStatsJSON struct {
	// Messages is how many messages the link shows; WatermarkAt when the newest of them was written.
	Messages    int        `json:"messages"`
	WatermarkAt *time.Time `json:"watermarkAt"`
	// Views counts share page views by others than the owner; LastViewedAt is the newest (null: never).
	Views        uint64     `json:"views"`
	LastViewedAt *time.Time `json:"lastViewedAt"`
}

func statsJSON(st store.ShareStats) shareStatsJSON {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return shareStatsJSON{Messages: st.Messages, WatermarkAt: opt(st.WatermarkAt), Views: st.Views, LastViewedAt: opt(st.LastViewedAt)}
}

// flushViews writes the views this process has counted, so a list shows them. A failure is logged
// by the counter and the list shows the stored figures.
func (s *Server) flushViews(ctx context.Context) {
	_ = s.views.flush(ctx)
}

// chatSharesJSON answers GET /api/sessions/{id}/shares.
type chatSharesJSON struct {
	Shares []chatShareJSON `json:"shares"`
	// Latest is the chat's newest message id: the watermark an update moves a link to.
	Latest uint64 `json:"latest"`
}

type chatShareJSON struct {
	shareJSON
	// Newer is true when the chat has messages the link does not show.
	Newer bool `json:"newer"`
}

func (s *Server) handleChatShares(w http.ResponseWriter, r *http.Request, u store.User) error {
	sess, err := s.ownedSession(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	latest, err := s.st.LastMessageID(r.Context(), sess.ID)
	if err != nil {
		return s.storeErr("last_message_id", err)
	}
	s.flushViews(r.Context())
	list, err := s.st.ListShares(r.Context(), u.ID)
	if err != nil {
		return s.storeErr("list_shares", err)
	}
	out := chatSharesJSON{Shares: []chatShareJSON{}, Latest: latest}
	for _, e := range list {
		// A link whose token is not kept (made before tokens were) cannot be handed out again.
		if e.SessionID != sess.ID || e.Token == "" {
			continue
		}
		out.Shares = append(out.Shares, chatShareJSON{shareJSON: s.toShareJSON(e.Token, e.Share), Newer: latest > e.Watermark})
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// maxShareUpdateBody bounds the PATCH body; it is one small JSON object.
const maxShareUpdateBody = 1 << 10

// handleUpdateShare moves one of the caller's links (named by token or id) to the chat's newest
// message. Not the caller's link is the same 404 as a missing one.
func (s *Server) handleUpdateShare(w http.ResponseWriter, r *http.Request, u store.User) error {
	var body struct {
		Watermark string `json:"watermark"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxShareUpdateBody+1))
	if err != nil {
		return errBadRequest("could not read the request body")
	}
	if len(raw) > maxShareUpdateBody || json.Unmarshal(raw, &body) != nil {
		return errBadRequest(`the body must be {"watermark":"latest"}`)
	}
	if body.Watermark != "latest" {
		return errBadRequest(`the only update is {"watermark":"latest"}: the link then covers the chat up to its newest message`)
	}
	ref := r.PathValue("token")
	if ref == "" || len(ref) > maxTokenLen {
		return errNotFound()
	}
	var (
		sh  store.Share
		tok string
	)
	if shareIDRE.MatchString(ref) {
		sh, err = s.st.GetShareByID(r.Context(), ref)
	} else {
		sh, err = s.st.GetShare(r.Context(), ref)
		tok = ref
	}
	if err != nil || sh.OwnerID != u.ID {
		if err == nil || errors.Is(err, store.ErrNotFound) {
			return errNotFound()
		}
		return s.storeErr("get_share_by_id", err)
	}
	latest, err := s.st.LastMessageID(r.Context(), sh.SessionID)
	if err != nil {
		return s.storeErr("last_message_id", err)
	}
	id := sh.TokenHash
	up, err := s.st.AdvanceShare(r.Context(), id, u.ID, latest)
	if err != nil {
		return s.storeErr("advance_share", err)
	}
	if up.Watermark != sh.Watermark {
		s.log.InfoContext(r.Context(), "share updated", "session", sh.SessionID, "user", u.ID, "from", sh.Watermark, "to", up.Watermark)
	}
	if tok == "" {
		tok = s.ownToken(r.Context(), u.ID, id)
	}
	writeJSON(w, http.StatusOK, s.toShareJSON(tok, up))
	return nil
}

// ownToken finds the token of the caller's link id (empty when it is not kept).
func (s *Server) ownToken(ctx context.Context, userID, id string) string {
	list, err := s.st.ListShares(ctx, userID)
	if err != nil {
		return ""
	}
	for _, e := range list {
		if e.ID() == id {
			return e.Token
		}
	}
	return ""
}

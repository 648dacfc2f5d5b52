package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/citegate/citegate/store"
)

// historyPageSize is how many visible messages (USER messages and answers) one session.history
// frame carries. session.open sends the newest page; the client asks for earlier ones with
// session.more, so opening a session of 10,000 messages costs what opening one of 50 does.
const historyPageSize = 50

// historyPageBytes bounds the content of one page as well: a page stops before the message that
// would take it past this (it always holds at least one), so fifty long answers do not make one
// frame of tens of megabytes.
const historyPageBytes = 2 << 20

// sessionPage answers session.open (before 0: the newest page) and session.more (the page of
// visible messages just older than message id before) with one session.history frame. hasMore
// tells whether anything older is left; before echoes the request, so the client knows the page
// goes above what it shows rather than replacing it.
func (c *client) sessionPage(ctx context.Context, f clientFrame, before uint64) {
	if !c.owns(ctx, f.SessionID) {
		c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
		return
	}
	if before == 0 && f.Newest != 0 {
		// The page was rendered with the newest page already in it (firstPage): if nothing was
		// added since, say so instead of sending the same fifty messages again.
		latest, err := c.s.hub.st.ListDialogBefore(ctx, f.SessionID, 0, 1)
		if err == nil && len(latest) == 1 && latest[0].ID == f.Newest {
			c.send(&wsFrame{Type: "session.unchanged", SessionID: f.SessionID, ClientMsgID: f.ClientMsgID})
			return
		}
	}
	msgs, more, err := c.s.historyPage(ctx, f.SessionID, before, c.lang)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			// Deleted since this replica cached its owner (DELETE /api/sessions/{id} elsewhere).
			c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
			return
		}
		c.s.storeErr("list_dialog_before", err)
		c.sendError(CodeInternal, c.say("could not load the session", "无法加载会话。"), f.SessionID, f.ClientMsgID)
		return
	}
	c.send(&wsFrame{Type: "session.history", SessionID: f.SessionID, ClientMsgID: f.ClientMsgID, Messages: &msgs, Before: before, HasMore: &more})
}

// historyPage is one page of a session's visible messages, rendered (before 0: the newest page),
// and whether anything older is left. The websocket's session.history and the app shell's first
// page (firstPage) both come from here, so the page a reload shows is the page the socket sends.
func (s *Server) historyPage(ctx context.Context, sessionID string, before uint64, lang string) ([]messageJSON, bool, error) {
	return s.historyPageN(ctx, sessionID, before, historyPageSize, lang)
}

// historyPageN is historyPage with at most limit messages (GET /api/sessions/{id}/messages?limit=).
func (s *Server) historyPageN(ctx context.Context, sessionID string, before uint64, limit int, lang string) ([]messageJSON, bool, error) {
	// ListDialogBefore reads the session's index backwards from the cursor and skips tool traffic
	// without decoding it: exactly the messages visible() keeps. One more than a page tells
	// whether an older one exists.
	page, err := s.st.ListDialogBefore(ctx, sessionID, before, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("history page: %w", err)
	}
	more := len(page) > limit
	if more {
		page = page[1:]
	}
	// Keep the newest messages that fit the byte budget.
	size := 0
	for i := len(page) - 1; i >= 0; i-- {
		size += len(page[i].Content)
		if size > historyPageBytes && i < len(page)-1 {
			page, more = page[i+1:], true
			break
		}
	}
	return s.pageJSON(ctx, page, lang), more, nil
}

// sessionMore handles {"type":"session.more","sessionId","before":<messageId>}.
func (c *client) sessionMore(ctx context.Context, f clientFrame) {
	if f.SessionID == "" || f.Before == 0 {
		c.sendError(CodeBadRequest, "session.more needs sessionId and before (the id of the oldest message shown)", f.SessionID, f.ClientMsgID)
		return
	}
	c.sessionPage(ctx, f, f.Before)
}

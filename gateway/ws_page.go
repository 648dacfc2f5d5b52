package gateway

import (
	"context"
	"errors"

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
	// ListDialogBefore reads the session's index backwards from the cursor and skips tool traffic
	// without decoding it: exactly the messages visible() keeps. One more than a page tells
	// whether an older one exists.
	page, err := c.s.hub.st.ListDialogBefore(ctx, f.SessionID, before, historyPageSize+1)
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
	more := len(page) > historyPageSize
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
	msgs := c.s.pageJSON(ctx, page, c.lang)
	c.send(&wsFrame{Type: "session.history", SessionID: f.SessionID, ClientMsgID: f.ClientMsgID, Messages: &msgs, Before: before, HasMore: &more})
}

// sessionMore handles {"type":"session.more","sessionId","before":<messageId>}.
func (c *client) sessionMore(ctx context.Context, f clientFrame) {
	if f.SessionID == "" || f.Before == 0 {
		c.sendError(CodeBadRequest, "session.more needs sessionId and before (the id of the oldest message shown)", f.SessionID, f.ClientMsgID)
		return
	}
	c.sessionPage(ctx, f, f.Before)
}

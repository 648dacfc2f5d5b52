package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"

	"github.com/citegate/citegate/gateway/web"
	"github.com/citegate/citegate/store"
)

// firstPage renders, for the app shell, the newest page of the chat the address names
// (/?s=<id>), so a reload or an opened link shows the chat before any script has run and the
// scripts need no round trip over the websocket to show it. The page comes from historyPage, as
// the websocket's session.history does: the same messages and the same sanitised HTML.
//
// It returns nil when the address names no chat, or one that does not exist or is not the user's
// (the shell then loads the old way, and the websocket answers not_found as before), or when the
// store fails (logged; the websocket will try again).
func (s *Server) firstPage(ctx context.Context, r *http.Request, u store.User, lang string) *web.FirstPage {
	id := r.URL.Query().Get("s")
	if id == "" || len(id) > 128 {
		return nil
	}
	sess, err := s.st.GetSession(ctx, id)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.storeErr("get_session", err)
		}
		return nil
	}
	if sess.UserID != u.ID {
		return nil
	}
	msgs, more, err := s.historyPage(ctx, id, 0, lang)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.storeErr("list_dialog_before", err)
		}
		return nil
	}
	views := make([]web.MessageView, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		views[i] = web.MessageView{ID: m.ID, Role: string(m.Role), HTML: template.HTML(m.HTML), CreatedAt: m.CreatedAt} // #nosec G203 -- sanitised by citations/markdown
		// The article holds the HTML; the frame would only carry it twice.
		m.HTML = ""
	}
	// json.Marshal escapes <, > and & (and U+2028/9), so the frame cannot end its script element.
	frame, err := json.Marshal(&wsFrame{Type: "session.history", SessionID: id, Messages: &msgs, HasMore: &more})
	if err != nil {
		s.log.Error("first page: encode the frame", "err", err)
		return nil
	}
	return &web.FirstPage{SessionID: id, Title: sess.Title, Messages: views, Frame: template.JS(frame)} // #nosec G203 -- JSON, escaped above
}

package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/gorilla/websocket"
)

// upgrader: read buffer small (frames are small), write buffers pooled so an idle connection holds
// none. The Origin check is done before Upgrade (it depends on how the client authenticated).
var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 4096,
	WriteBufferPool: &sync.Pool{},
	CheckOrigin:     func(*http.Request) bool { return true },
}

// handleWS authenticates, admits the connection under the per-user cap and upgrades.
// Cookie-authenticated upgrades must come from our own origin (browsers attach cookies to
// cross-site websocket requests); Bearer clients are not browsers.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	u, fromCookie, err := s.authenticate(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if fromCookie && !s.originAllowed(r) {
		s.writeError(w, r, &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: "websocket origin not allowed"})
		return
	}
	c := newClient(s, u, userLang(r, u))
	// Registering before the upgrade reserves the slot, so concurrent upgrades of one user cannot
	// together pass the cap, and a refusal is still an HTTP answer the client can read.
	if err := s.hub.register(c); err != nil {
		if errors.Is(err, errTooManyConns) {
			s.log.Warn("websocket refused: per-user connection cap", "user", u.ID, "max", s.hub.maxConns)
			s.writeError(w, r, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
				Message: "too many open connections: at most " + itoa(s.hub.maxConns) + " per user; close another tab or client and try again"})
			return
		}
		s.writeError(w, r, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "server is shutting down"})
		return
	}
	defer s.hub.unregister(c)
	// The upgrader gets the socket wrapped, so the write pump can batch its writes (ws_batch.go).
	hw := &batchHijacker{ResponseWriter: w}
	conn, err := upgrader.Upgrade(hw, r, nil)
	if err != nil {
		c.close()
		return // Upgrade has answered the client already
	}
	c.mu.Lock()
	c.conn = conn
	if !s.hub.unbatched {
		c.batch = hw.conn
	}
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	pumpDone := make(chan struct{})
	go func() {
		defer close(pumpDone)
		defer s.recoverGo("websocket write pump")
		c.writePump()
	}()
	func() {
		defer s.recoverGo("websocket read pump")
		c.readPump(ctx)
	}()
	c.close()
	// The client stays registered until its close frame is out and the socket closed, so
	// closeAll's wait covers the whole connection.
	<-pumpDone
}

func (s *Server) recoverGo(what string) {
	if v := recover(); v != nil {
		s.log.Error("recovered panic", "in", what, "panic", v)
	}
}

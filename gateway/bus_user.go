package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A user's tabs may be connected to different replicas. What they learn outside any run — a
// session created (the sender matches it by clientMsgId), renamed or deleted — goes to the user's
// clients here and, through the bus, to the user's clients on every other replica (one small
// packet; the frame is encoded once).

// userFrameTypes are the frames accepted from another replica for a user's clients. Anything else
// is dropped: the bus carries only what the desktop contract lets every tab see.
var userFrameTypes = map[string]bool{"session.created": true, "session.updated": true, "session.deleted": true,
	"settings.updated": true} // settings.updated concerns the user, not a session (settings.go)

// toUserEverywhere sends f to every client of the user, on this replica and on every other.
func (s *Server) toUserEverywhere(userID string, f *wsFrame) {
	data, err := json.Marshal(f)
	if err != nil {
		s.log.Error("encode websocket frame", "type", f.Type, "err", err)
		return
	}
	s.hub.toUserRaw(userID, data)
	if s.bus.Shared() {
		s.bus.PublishUserFrame(userID, data)
	}
}

// toUserRaw queues an encoded frame for every client of the user here.
func (h *hub) toUserRaw(userID string, data []byte) {
	for _, c := range h.clientsOf(userID) {
		c.enqueue(outFrame{data: data})
	}
}

// onRemoteUserFrame delivers a frame another replica sent to the user's clients, after updating
// what this replica caches about the session: a deleted session has no owner from now on (its id
// routes and authorises nothing here either), a created one is the user's.
func (h *hub) onRemoteUserFrame(userID string, frame []byte) {
	defer h.s.recoverGo("websocket remote user frame")
	var head struct {
		Type      string `json:"type"`
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(frame, &head); err != nil || !userFrameTypes[head.Type] || (head.SessionID == "" && head.Type != "settings.updated") {
		h.s.log.Warn("event bus: user frame of an unknown kind ignored", "type", head.Type, "err", err)
		return
	}
	switch head.Type {
	case "session.created":
		h.owners.set(head.SessionID, userID)
	case "session.deleted":
		h.owners.set(head.SessionID, "")
	}
	h.toUserRaw(userID, frame)
}

// closeUserEverywhere closes every websocket connection of the user, here and on every other
// replica: after its token changed or it was revoked, no open connection keeps working with the
// old credentials (a new connection authenticates afresh).
func (s *Server) closeUserEverywhere(userID string) {
	s.hub.closeUser(userID)
	if s.bus.Shared() {
		s.bus.PublishCloseUser(userID)
	}
}

// NotifyCloseUser tells every replica serving the PostgreSQL database at url to close the user's
// websocket connections. `citegate user token|revoke` change the database directly, with no
// replica involved, and call it afterwards; replicas not listening at that moment have nothing
// to close. It sends one notification and waits at most 10 s.
func NotifyCloseUser(ctx context.Context, url, userID string) error {
	if userID == "" {
		return errors.New("gateway: notify replicas: no user id")
	}
	b, err := NewPGBus(PGBusConfig{URL: url})
	if err != nil {
		return err
	}
	defer b.Close()
	packets, err := b.pk.pack([]busItem{{closeUser: userID}})
	if err != nil {
		return fmt.Errorf("gateway: notify replicas: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.send(ctx, packets); err != nil {
		return fmt.Errorf("gateway: notify replicas: %w", err)
	}
	return nil
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

// defaultMaxConnsPerUser is the per-user cap on open websocket connections when the
// configuration sets none: enough for many tabs and devices, not for a script that opens
// connections until the server runs out of memory.
const defaultMaxConnsPerUser = 16

// closeGrace bounds how long closeAll waits for connections to send their close frame before it
// closes the remaining sockets outright.
const closeGrace = 3 * time.Second

// wsStore is what the websocket layer reads and writes; any store.Backend satisfies it.
type wsStore interface {
	GetSession(ctx context.Context, id string) (store.Session, error)
	CreateSession(ctx context.Context, s store.Session) (store.Session, error)
	ListDialogBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]store.Message, error)
	GetMessage(ctx context.Context, id uint64) (store.Message, error)
}

// wsAgent is what the websocket layer asks of the agent; *agent.Agent satisfies it.
type wsAgent interface {
	Submit(ctx context.Context, t agent.Turn) (*agent.RunHandle, error)
	Cancel(sessionID string) bool
}

// errTooManyConns refuses an upgrade past the per-user cap.
var errTooManyConns = errors.New("too many open connections")

// errHubClosed refuses an upgrade during shutdown.
var errHubClosed = errors.New("server is shutting down")

// hub keeps the open connections by user and routes run events to them (ws_events.go).
type hub struct {
	s        *Server
	st       wsStore
	ag       wsAgent
	maxConns int

	mu    sync.RWMutex
	users map[string]map[*client]struct{}
	// lists holds each user's clients as a slice that is replaced, never changed, when one comes or
	// goes, so routing an event takes it without copying.
	lists  map[string][]*client
	count  int
	closed bool
	wg     sync.WaitGroup

	owners *ownerCache
	runs   *runTracker
	lanes  *lanes
	live   *liveAnswers // answers being streamed, rendered progressively (ws_progressive.go)
	deltas *deltaJoiner // joins a local run's answer.delta text before it is routed (ws_deltas.go)
	// unbatched turns the write pumps' batching off (ws_batch.go), for a benchmark's baseline.
	unbatched bool
}

func newHub(s *Server, st wsStore, ag wsAgent, maxConns int) *hub {
	if maxConns <= 0 {
		maxConns = defaultMaxConnsPerUser
	}
	h := &hub{s: s, st: st, ag: ag, maxConns: maxConns, users: make(map[string]map[*client]struct{}),
		lists: make(map[string][]*client), owners: newOwnerCache(), runs: newRunTracker(s.m)}
	h.lanes = newLanes(h)
	h.live = newLiveAnswers(h)
	h.deltas = newDeltaJoiner(h.forward, s.cfg.Now, func() { s.recoverGo("websocket delta flush") })
	return h
}

// register admits c, or refuses it when the hub is closed or the user is at the cap. It is called
// before the upgrade, so a refused client gets an ordinary HTTP error.
func (h *hub) register(c *client) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errHubClosed
	}
	set := h.users[c.user.ID]
	if len(set) >= h.maxConns {
		return fmt.Errorf("%w: at most %d per user", errTooManyConns, h.maxConns)
	}
	if set == nil {
		set = make(map[*client]struct{})
		h.users[c.user.ID] = set
	}
	set[c] = struct{}{}
	h.lists[c.user.ID] = append(slices.Clip(h.lists[c.user.ID]), c)
	h.count++
	h.wg.Add(1)
	h.s.m.wsClients.Inc()
	return nil
}

func (h *hub) unregister(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.users[c.user.ID]
	if _, ok := set[c]; !ok {
		return
	}
	delete(set, c)
	if len(set) == 0 {
		delete(h.users, c.user.ID)
		delete(h.lists, c.user.ID)
	} else {
		h.lists[c.user.ID] = slices.DeleteFunc(slices.Clone(h.lists[c.user.ID]), func(x *client) bool { return x == c })
	}
	h.count--
	h.wg.Done()
	h.s.m.wsClients.Dec()
}

func (h *hub) isClosed() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closed
}

// closeAll closes every client and waits for their connections to wind down; sockets still open
// after closeGrace (a client that stopped reading, a write pump blocked on a full socket) are closed
// outright.
func (h *hub) closeAll() {
	h.mu.Lock()
	h.closed = true
	var all []*client
	for _, set := range h.users {
		for c := range set {
			all = append(all, c)
			c.close()
		}
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeGrace):
		h.s.log.Warn("websocket clients did not close in time; closing their sockets")
		for _, c := range all {
			c.mu.Lock()
			conn := c.conn
			c.mu.Unlock()
			if conn != nil {
				_ = conn.NetConn().Close()
			}
		}
	}
}

// closeUser closes every connection of the user (e.g. after the user's token changed).
func (h *hub) closeUser(userID string) {
	for _, c := range h.clientsOf(userID) {
		c.close()
	}
}

// clientsOf returns a snapshot of the user's clients; callers must not change it.
func (h *hub) clientsOf(userID string) []*client {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.lists[userID]
}

func (h *hub) anyClients() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.count > 0
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

// ActiveRunStore finds a session's RUNNING run, wherever it executes; *store.Store satisfies it.
type ActiveRunStore interface {
	ActiveRun(ctx context.Context, sessionID string) (store.Run, error)
}

// ClusterAgent makes the local agent's Cancel reach a run that executes on another replica: when
// no run of the session is running here but the shared store has one RUNNING, it publishes a cancel
// request and the replica executing the run cancels it. Submit runs turns here, as before. With a
// bus that is not shared (one process) it returns ag itself.
func ClusterAgent(ag DispatchAgent, bus Bus, st ActiveRunStore, log *slog.Logger) DispatchAgent {
	if bus == nil || !bus.Shared() || st == nil {
		return ag
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &clusterAgent{DispatchAgent: ag, bus: bus, st: st, log: log}
}

type clusterAgent struct {
	DispatchAgent
	bus Bus
	st  ActiveRunStore
	log *slog.Logger
}

// Cancel cancels the session's run here, or asks the other replicas to. It reports whether a run
// of the session was running (here, or anywhere according to the store).
func (c *clusterAgent) Cancel(sessionID string) bool {
	if c.DispatchAgent.Cancel(sessionID) {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupWait)
	defer cancel()
	if _, err := c.st.ActiveRun(ctx, sessionID); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			c.log.Warn("cancel: cannot look up the session's running run", "session", sessionID, "err", err)
		}
		return false
	}
	c.bus.PublishCancel(sessionID)
	return true
}

// busReceiver is the Server's BusHandler: remote events and user frames go to the hub, remote
// cancels to the local agent (never back to the bus).
type busReceiver struct{ s *Server }

func (r busReceiver) RemoteEvent(ev agent.Event) { r.s.hub.onRemote(ev) }

func (r busReceiver) RemoteUserFrame(userID string, frame []byte) {
	r.s.hub.onRemoteUserFrame(userID, frame)
}

func (r busReceiver) RemoteCloseUser(userID string) {
	r.s.hub.closeUser(userID)
	r.s.log.Info("user's connections closed at another replica's request", "user", userID)
}

func (r busReceiver) RemoteCancel(sessionID string) {
	if r.s.ag.Cancel(sessionID) {
		r.s.log.Info("run cancelled at another replica's request", "session", sessionID)
	}
}

// RunBus receives the other replicas' events and cancel requests until ctx ends. serve runs it for
// the whole life of the process, beyond the HTTP server, so that runs cancelled during shutdown
// still reach other replicas' clients.
func (s *Server) RunBus(ctx context.Context) error {
	if err := s.bus.Run(ctx, busReceiver{s}); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

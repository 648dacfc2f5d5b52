package gateway

import (
	"context"

	"github.com/citegate/citegate/agent"
)

// Bus joins the replicas of one deployment: it carries the run events of desktop sessions to the
// replicas whose clients watch them, and asks the replica that executes a run to cancel it. With
// one process (the bbolt default) there is nobody to tell, and LocalBus does nothing at no cost;
// several `serve` processes on one PostgreSQL use PGBus (bus_pg.go, LISTEN/NOTIFY).
//
// Delivery is best effort and ordered per publishing replica: a receiver may miss events while
// its connection to the broker is down (it then sees the run's stored outcome on the next
// session.open), but it never sees a run's events out of order.
type Bus interface {
	// Publish hands a local run event to the other replicas. It is called in the run's goroutine
	// and never blocks.
	Publish(ev agent.Event)
	// PublishCancel asks the other replicas to cancel the session's running run. It never blocks.
	PublishCancel(sessionID string)
	// PublishUserFrame hands the other replicas an encoded websocket frame for every client of the
	// user there (what a user's other tabs learn outside any run: a session created, renamed or
	// deleted). It never blocks.
	PublishUserFrame(userID string, frame []byte)
	// PublishCloseUser asks the other replicas to close every connection of the user (its token
	// changed or it was revoked). It never blocks.
	PublishCloseUser(userID string)
	// Run delivers the other replicas' events and cancel requests to h until ctx ends.
	Run(ctx context.Context, h BusHandler) error
	// Shared reports whether other replicas may exist, i.e. whether events and cancels must be
	// published at all.
	Shared() bool
}

// BusHandler receives what other replicas publish. Its methods are called from the bus's receive
// goroutine, one at a time in publication order, and must not block.
type BusHandler interface {
	RemoteEvent(ev agent.Event)
	RemoteCancel(sessionID string)
	RemoteUserFrame(userID string, frame []byte)
	RemoteCloseUser(userID string)
}

// LocalBus is the Bus of a single process: nothing to publish, nothing to receive.
type LocalBus struct{}

// Publish does nothing: the local hub already saw the event.
func (LocalBus) Publish(agent.Event) {}

// PublishCancel does nothing: the local agent is the only one.
func (LocalBus) PublishCancel(string) {}

// PublishUserFrame does nothing: the user's clients are all here.
func (LocalBus) PublishUserFrame(string, []byte) {}

// PublishCloseUser does nothing: the user's connections are all here.
func (LocalBus) PublishCloseUser(string) {}

// Run waits for ctx to end.
func (LocalBus) Run(ctx context.Context, _ BusHandler) error {
	<-ctx.Done()
	return nil
}

// Shared reports false: there is one replica.
func (LocalBus) Shared() bool { return false }

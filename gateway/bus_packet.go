package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/agent"
)

// transport moves packets between replicas; PGBus is the PostgreSQL one. send delivers packets
// in order to every other replica (or fails); listen hands each received payload to deliver, one
// at a time in arrival order, and reports whether it currently receives, until ctx ends.
type transport interface {
	send(ctx context.Context, packets [][]byte) error
	listen(ctx context.Context, deliver func([]byte), ready func(bool)) error
}

// packetBus is a Bus over a transport: the outbox, the packet format (bus_wire.go) and the
// publishing loop are the same whatever carries the packets.
type packetBus struct {
	replica string
	tr      transport
	log     *slog.Logger
	now     func() time.Time
	out     *outbox
	pk      packer
	ready   atomic.Bool
	running atomic.Bool
	// ended is told of every session whose run another replica ended (OnRunEnded).
	ended atomic.Pointer[func(sessionID string)]
	m     busMetrics
}

type busMetrics struct {
	packets  prometheus.Counter
	dropped  prometheus.Counter
	received prometheus.Counter
	lost     prometheus.Counter
}

func newPacketBus(replica string, tr transport, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*packetBus, error) {
	if replica == "" {
		replica = NewReplicaID()
	}
	if len(replica) > maxReplicaIDBytes {
		return nil, fmt.Errorf("gateway: bus: replica id longer than %d bytes", maxReplicaIDBytes)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	b := &packetBus{
		replica: replica, tr: tr, log: log.With("component", "bus", "replica", replica), now: now,
		out: newOutbox(), pk: packer{replica: replica},
		m: busMetrics{
			packets:  prometheus.NewCounter(prometheus.CounterOpts{Name: "citegate_bus_packets_sent_total", Help: "Notification packets this replica published to the other replicas."}),
			dropped:  prometheus.NewCounter(prometheus.CounterOpts{Name: "citegate_bus_events_dropped_total", Help: "Run events not published because the outbox was full or the database refused them."}),
			received: prometheus.NewCounter(prometheus.CounterOpts{Name: "citegate_bus_events_received_total", Help: "Run events received from other replicas."}),
			lost:     prometheus.NewCounter(prometheus.CounterOpts{Name: "citegate_bus_packets_lost_total", Help: "Packets of other replicas known missed (sequence gaps, e.g. while reconnecting)."}),
		},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{b.m.packets, b.m.dropped, b.m.received, b.m.lost} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("gateway: bus metrics: %w", err)
			}
		}
	}
	return b, nil
}

// Replica is this process's replica id.
func (b *packetBus) Replica() string { return b.replica }

// Shared reports true: other replicas may listen.
func (b *packetBus) Shared() bool { return true }

// Ready reports whether the bus currently receives (for PostgreSQL: connected, LISTEN issued).
func (b *packetBus) Ready() bool { return b.ready.Load() }

// Publish queues a desktop run's event for the other replicas; events of chat-channel runs have no
// desktop watcher and are not published.
func (b *packetBus) Publish(ev agent.Event) {
	if ev.Channel != "desktop" {
		return
	}
	if !b.out.push(busItem{ev: &ev}) {
		b.m.dropped.Inc()
	}
}

// PublishCancel queues a cancel request for the session's run.
func (b *packetBus) PublishCancel(sessionID string) {
	if !b.out.push(busItem{cancel: sessionID}) {
		b.m.dropped.Inc()
	}
}

// PublishRunEnded tells the other replicas that a run of the session ended, so that a turn of the
// session waiting there starts (bus_order.go).
func (b *packetBus) PublishRunEnded(sessionID string) {
	if sessionID == "" || len(sessionID) > maxUserFrameBytes {
		return
	}
	if !b.out.push(busItem{ended: sessionID}) {
		b.m.dropped.Inc()
	}
}

// OnRunEnded registers fn for the sessions whose run another replica ended. fn is called from the
// receive goroutine and must not block.
func (b *packetBus) OnRunEnded(fn func(sessionID string)) { b.ended.Store(&fn) }

// PublishUserFrame queues a websocket frame for every client of the user on the other replicas.
// A frame too large for a packet is dropped (counted and logged): the frames sent this way are a
// session's title and id, far below the bound.
func (b *packetBus) PublishUserFrame(userID string, frame []byte) {
	if userID == "" || len(userID)+len(frame) > maxUserFrameBytes {
		b.m.dropped.Inc()
		b.log.Warn("event bus: user frame not published (no user, or too large)", "bytes", len(frame))
		return
	}
	if !b.out.push(busItem{user: &userFrame{User: userID, Frame: frame}}) {
		b.m.dropped.Inc()
	}
}

// PublishCloseUser queues a request that every other replica close the user's connections.
func (b *packetBus) PublishCloseUser(userID string) {
	if userID == "" || len(userID) > maxUserFrameBytes {
		return
	}
	if !b.out.push(busItem{closeUser: userID}) {
		b.m.dropped.Inc()
	}
}

// Run publishes the outbox and delivers other replicas' packets to h until ctx ends; it returns nil
// then. Only one Run may be active.
func (b *packetBus) Run(ctx context.Context, h BusHandler) error {
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("gateway: bus: already running")
	}
	defer b.running.Store(false)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.publishLoop(ctx)
	}()
	un := newUnpacker(b.replica, b.now)
	deliver := func(payload []byte) {
		gaps := un.gaps
		got, err := un.unpack(payload)
		if d := un.gaps - gaps; d > 0 {
			b.m.lost.Add(float64(d))
			b.log.Warn("event bus: missed packets of another replica; its clients here may miss live updates", "packets", d)
		}
		if err != nil {
			b.log.Warn("event bus: malformed packet ignored", "err", err)
			return
		}
		for _, uf := range got.users {
			h.RemoteUserFrame(uf.User, uf.Frame)
		}
		for _, ev := range got.events {
			b.m.received.Inc()
			h.RemoteEvent(ev)
		}
		for _, sid := range got.cancels {
			h.RemoteCancel(sid)
		}
		for _, uid := range got.closes {
			h.RemoteCloseUser(uid)
		}
		if fn := b.ended.Load(); fn != nil {
			for _, sid := range got.ended {
				(*fn)(sid)
			}
		}
	}
	err := b.tr.listen(ctx, deliver, func(ok bool) { b.ready.Store(ok) })
	b.ready.Store(false)
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("gateway: bus: %w", err)
}

// publishLoop sends the outbox whenever it holds something. Events that arrive while a batch is
// on its way wait and coalesce, so the number of round trips falls as the load grows.
func (b *packetBus) publishLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.out.wake:
		}
		items := b.out.take()
		if len(items) == 0 {
			continue
		}
		packets, err := b.pk.pack(items)
		if err != nil {
			b.log.Error("event bus: cannot encode events", "err", err)
			b.m.dropped.Add(float64(len(items)))
			continue
		}
		if err := b.sendRetry(ctx, packets); err != nil {
			if ctx.Err() != nil {
				return
			}
			b.log.Warn("event bus: events not published; other replicas' clients miss them", "packets", len(packets), "err", err)
			b.m.dropped.Add(float64(len(items)))
			continue
		}
		b.m.packets.Add(float64(len(packets)))
	}
}

// sendRetry retries a batch a few times while the transport fails; after that the batch is dropped
// (receivers see a gap) so that newer events are not held behind it.
func (b *packetBus) sendRetry(ctx context.Context, packets [][]byte) error {
	var err error
	for attempt := range publishRetries {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		if err = b.tr.send(ctx, packets); err == nil {
			return nil
		}
	}
	return err
}

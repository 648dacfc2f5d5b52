package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

// Session order across replicas. Feishu's long connection and DingTalk's Stream hand the messages
// of one chat to any replica, and WeChat webhooks or a load balancer do the same; each replica's
// dispatcher and agent queue a session's turns only locally. TurnOrder (the agent's
// Config.Order) holds a stored turn back while an earlier turn of its session — stored before it,
// RUNNING in the database on another replica, executing or itself waiting — has not ended, and
// lets it start as soon as that one is COMPLETED, FAILED, CANCELLED or reaped "interrupted".
//
// Nothing waits on the database: a wait is one indexed query (store.RunAhead), then sleep until
// a turn of the session is over — a chat turn once its answer (or the notice of its interruption)
// has been handed to the platform (DispatcherConfig.TurnDone), a desktop run once it ended; on
// this replica directly, on the others by a "run ended" notice over the bus — or until
// DefaultTurnPoll passes, so that a lost notification delays a chat, never stalls it. Woken after
// the delivery, the next turn's answer reaches the chat after the earlier one; only a poll that
// falls between an earlier run's end and its delivery can let the next turn start before that
// delivery (its model still sees the earlier answer, which is committed). The platform's ack is
// not delayed: the dispatcher has stored and queued the turn before it returns.

// DefaultTurnPoll is how often a waiting turn asks the database again when no notice came.
const DefaultTurnPoll = 2 * time.Second

// OrderStore finds the earlier turn a turn waits for; store.Backend satisfies it.
type OrderStore interface {
	RunAhead(ctx context.Context, runID, owner string) (store.Run, error)
}

// orderBus is what TurnOrder needs of the bus: telling the other replicas that a run of a session
// ended, and hearing when theirs do. *PGBus satisfies it.
type orderBus interface {
	PublishRunEnded(sessionID string)
	OnRunEnded(fn func(sessionID string))
}

// TurnOrderConfig configures a TurnOrder.
type TurnOrderConfig struct {
	Store OrderStore
	// Owner is this replica's run owner (store.Run.LeaseOwner of the runs it stores): its own
	// earlier turns are ordered by its agent's queue and are not waited for here.
	Owner string
	Bus   orderBus
	// Poll is how often a waiting turn asks again without a notice; default DefaultTurnPoll.
	Poll       time.Duration
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// TurnOrder implements agent.TurnOrder for replicas sharing a PostgreSQL database.
type TurnOrder struct {
	cfg     TurnOrderConfig
	log     *slog.Logger
	waiting prometheus.Gauge
	waits   prometheus.Histogram
	held    atomic.Int64 // what waiting shows

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{} // session id → the wake channels of its waiting turns
}

var _ agent.TurnOrder = (*TurnOrder)(nil)

// NewTurnOrder checks cfg and listens on the bus for the runs other replicas end.
func NewTurnOrder(cfg TurnOrderConfig) (*TurnOrder, error) {
	if cfg.Store == nil || cfg.Owner == "" || cfg.Bus == nil {
		return nil, errors.New("gateway: turn order: Store, Owner and Bus are required")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultTurnPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	o := &TurnOrder{
		cfg: cfg, log: cfg.Logger.With("component", "turn-order"),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "citegate_turns_waiting",
			Help: "Turns held back here because an earlier turn of their session runs on another replica."}),
		waits: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "citegate_turn_wait_seconds",
			Help:    "How long a held-back turn waited for the earlier turns of its session on other replicas.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}}),
		waiters: make(map[string]map[chan struct{}]struct{}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{o.waiting, o.waits} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	cfg.Bus.OnRunEnded(o.wake)
	return o, nil
}

// WaitTurn returns once no earlier turn of the session is RUNNING on another replica (nil), or
// when ctx ends (its error). Failed lookups are logged and retried: the turn keeps its place.
func (o *TurnOrder) WaitTurn(ctx context.Context, sessionID, runID string) error {
	w := make(chan struct{}, 1)
	o.mu.Lock()
	if o.waiters[sessionID] == nil {
		o.waiters[sessionID] = make(map[chan struct{}]struct{})
	}
	o.waiters[sessionID][w] = struct{}{}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.waiters[sessionID], w)
		if len(o.waiters[sessionID]) == 0 {
			delete(o.waiters, sessionID)
		}
		o.mu.Unlock()
	}()
	var held time.Time
	defer func() {
		if !held.IsZero() {
			o.waiting.Dec()
			o.held.Add(-1)
			o.waits.Observe(time.Since(held).Seconds())
		}
	}()
	timer := time.NewTimer(o.cfg.Poll)
	defer timer.Stop()
	for {
		// Registered before the lookup: a run that ends after it is read as RUNNING wakes w.
		qctx, cancel := context.WithTimeout(ctx, max(o.cfg.Poll, 5*time.Second))
		ahead, err := o.cfg.Store.RunAhead(qctx, runID, o.cfg.Owner)
		cancel()
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			o.log.Warn("cannot look up the earlier turns of the session; asking again", "session", sessionID, "run", runID, "err", err)
		case held.IsZero():
			held = time.Now()
			o.waiting.Inc()
			o.held.Add(1)
			o.log.Info("turn waits for an earlier turn of its session on another replica", "session", sessionID, "run", runID,
				"ahead", ahead.ID, "ahead_owner", ahead.LeaseOwner)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(o.cfg.Poll)
		select {
		case <-w:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Waiting is how many turns are held back here now (the citegate_turns_waiting gauge).
func (o *TurnOrder) Waiting() int { return int(o.held.Load()) }

// wake tells the session's waiting turns here to look again. It never blocks.
func (o *TurnOrder) wake(sessionID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for w := range o.waiters[sessionID] {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// RunEnded is told of every turn that is over here (a desktop run ended, a chat turn's answer or
// interruption notice delivered): turns of the session waiting here look again, and the other
// replicas are told.
func (o *TurnOrder) RunEnded(sessionID string) {
	o.wake(sessionID)
	o.cfg.Bus.PublishRunEnded(sessionID)
}

// AgentEvent is the agent subscriber for desktop runs (run.finished is committed when it is
// emitted). Chat runs are reported by the dispatcher once their answer is delivered (TurnDone).
func (o *TurnOrder) AgentEvent(ev agent.Event) {
	if ev.Type == agent.EventRunFinished && ev.Channel == "desktop" {
		o.RunEnded(ev.SessionID)
	}
}

package gateway

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/citegate/citegate/store"
)

// DefaultRunLease is how far one renewal moves a replica's leases. The store must give new runs
// the same lease (for PostgreSQL, store.Options.RunLease).
//
// The margins, for a lease L: a replica renews its runs every L/5 (leaseRound), each time to a
// full L from then, and a reaper fails only runs whose lease passed more than L/4 ago
// (leaseGrace). So a live run is reaped only after its replica failed to renew it for L + L/4
// (25 s, five rounds in a row, or a clock that far apart from the reaper's), while a run of a
// replica that died is failed at most L + L/4 + L/5 = 1.45 L (29 s) after the replica's last
// renewal.
const DefaultRunLease = 20 * time.Second

// leaseRound is the period of renewals and reap rounds for a lease.
func leaseRound(lease time.Duration) time.Duration { return lease / 5 }

// leaseGrace is how long past its lease a run is still left alone.
func leaseGrace(lease time.Duration) time.Duration { return lease / 4 }

// LeaseStore is what run leases need from a store shared by the replicas; store.Backend satisfies
// it.
type LeaseStore interface {
	RenewRunLeases(ctx context.Context, owner string, until time.Time) (int, error)
	ReapExpiredRuns(ctx context.Context, now time.Time) ([]store.Run, error)
}

// LeasesConfig configures Leases.
type LeasesConfig struct {
	Store LeaseStore
	// Owner is the name this replica's runs are leased under (store.Run.LeaseOwner, set by the
	// store when it creates a run).
	Owner string
	// Lease is how far a renewal moves the leases; default DefaultRunLease. Rounds happen every
	// Lease/5 (see DefaultRunLease for the margins).
	Lease time.Duration
	// Interrupted is told of each run this replica reaped (already FAILED "interrupted" in the
	// store), to tell its user; it must not block for long.
	Interrupted func(store.Run)
	Logger      *slog.Logger
	Now         func() time.Time
}

// Leases keeps this replica's runs (queued ones too) leased, and reaps the runs of replicas that
// stopped renewing theirs.
type Leases struct {
	cfg LeasesConfig
	log *slog.Logger
}

// NewLeases checks cfg and fills the defaults.
func NewLeases(cfg LeasesConfig) (*Leases, error) {
	if cfg.Store == nil || cfg.Owner == "" {
		return nil, errors.New("gateway: leases: Store and Owner are required")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultRunLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interrupted == nil {
		cfg.Interrupted = func(store.Run) {}
	}
	return &Leases{cfg: cfg, log: cfg.Logger.With("component", "leases", "owner", cfg.Owner)}, nil
}

// Run renews and reaps every Lease/5 until ctx ends.
func (l *Leases) Run(ctx context.Context) {
	t := time.NewTicker(leaseRound(l.cfg.Lease))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.Round(ctx)
		}
	}
}

// Round renews this replica's leases, then reaps the runs whose lease passed more than the grace
// period ago. Failures are logged; the next round tries again.
func (l *Leases) Round(ctx context.Context) {
	wait := leaseRound(l.cfg.Lease)
	rctx, cancel := context.WithTimeout(ctx, wait)
	_, err := l.cfg.Store.RenewRunLeases(rctx, l.cfg.Owner, l.cfg.Now().Add(l.cfg.Lease))
	cancel()
	if err != nil && ctx.Err() == nil {
		l.log.Warn("could not renew run leases; if this goes on for a lease, other replicas fail this replica's runs", "err", err)
	}
	rctx, cancel = context.WithTimeout(ctx, wait)
	reaped, err := l.cfg.Store.ReapExpiredRuns(rctx, l.cfg.Now().Add(-leaseGrace(l.cfg.Lease)))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("could not reap runs of stopped replicas", "err", err)
		}
		return
	}
	for _, r := range reaped {
		l.log.Warn("run of a stopped replica marked FAILED (interrupted)", "run", r.ID, "session", r.SessionID, "owner", r.LeaseOwner, "channel", r.Channel)
		l.tell(r)
	}
}

func (l *Leases) tell(r store.Run) {
	defer func() {
		if v := recover(); v != nil {
			l.log.Error("telling the user of an interrupted run panicked", "run", r.ID, "panic", v)
		}
	}()
	l.cfg.Interrupted(r)
}

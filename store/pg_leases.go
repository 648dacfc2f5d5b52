package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ActiveRun returns the session's RUNNING run, the newest when there are several (see
// Store.ActiveRun).
func (p *PG) ActiveRun(ctx context.Context, sessionID string) (Run, error) {
	var r Run
	err := p.q(ctx, "active run", func(q pgq) error {
		var err error
		r, err = scanRun(q.QueryRow(ctx, `SELECT `+pgRunCols+` FROM runs WHERE session_id = $1 AND phase = 'RUNNING'
			ORDER BY started_at DESC, seq DESC LIMIT 1`, sessionID))
		if err != nil {
			return notFound(err, "active run of session", sessionID)
		}
		return nil
	})
	return r, err
}

// RenewRunLeases moves to until the lease of every RUNNING run owned by owner, in one statement
// (see Store.RenewRunLeases).
func (p *PG) RenewRunLeases(ctx context.Context, owner string, until time.Time) (int, error) {
	if owner == "" {
		return 0, fmt.Errorf("store: renew run leases: %w: empty owner", ErrInvalid)
	}
	n := 0
	err := p.q(ctx, "renew run leases", func(q pgq) error {
		tag, err := q.Exec(ctx, `UPDATE runs SET lease_until = $2 WHERE owner = $1 AND phase = 'RUNNING'`, owner, p.norm(until))
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// ReapExpiredRuns ends every RUNNING run whose lease passed before now as FAILED "interrupted" and
// returns them (see Store.ReapExpiredRuns). It is one UPDATE … RETURNING: of several replicas
// reaping at once, each run goes to exactly one.
func (p *PG) ReapExpiredRuns(ctx context.Context, now time.Time) ([]Run, error) {
	var out []Run
	err := p.q(ctx, "reap expired runs", func(q pgq) error {
		rows, err := q.Query(ctx, `UPDATE runs SET phase = 'FAILED', error = $2, ended_at = $3, lease_until = NULL
			WHERE phase = 'RUNNING' AND lease_until IS NOT NULL AND lease_until < $1
			RETURNING `+pgRunCols, p.norm(now), ErrorInterrupted, p.nowUTC())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

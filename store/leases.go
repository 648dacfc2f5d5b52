package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrorInterrupted is the Error of a run that ended because the process executing it stopped
// (crash, kill, lapsed heartbeat) rather than by its own conclusion.
const ErrorInterrupted = "interrupted"

// ActiveRun returns the session's RUNNING run — the newest when there are several — or
// ErrNotFound when none is running. Another replica may be executing it.
func (s *Store) ActiveRun(ctx context.Context, sessionID string) (Run, error) {
	var out Run
	found := false
	err := s.view(ctx, "active run", func(tx *bolt.Tx) error {
		runs := tx.Bucket(bucketRuns)
		// Only running runs are listed there, so the scan is as long as the work in progress.
		return tx.Bucket(bucketRunning).ForEach(func(id, _ []byte) error {
			var r Run
			if getJSON(runs, id, "run", &r) != nil {
				return nil // a corrupt record is not this session's running run
			}
			if r.SessionID == sessionID && r.Phase == PhaseRunning && (!found || r.StartedAt.After(out.StartedAt)) {
				out, found = r, true
			}
			return nil
		})
	})
	if err != nil {
		return Run{}, err
	}
	if !found {
		return Run{}, fmt.Errorf("store: active run of session %q: %w", sessionID, ErrNotFound)
	}
	return out, nil
}

// RenewRunLeases moves to until the lease of every RUNNING run owned by owner — one write for all
// of a replica's runs, queued ones included — and returns how many it renewed. Finished and reaped
// runs keep theirs.
func (s *Store) RenewRunLeases(ctx context.Context, owner string, until time.Time) (int, error) {
	if owner == "" {
		return 0, fmt.Errorf("store: renew run leases: %w: empty owner", ErrInvalid)
	}
	until = s.norm(until)
	n := 0
	err := s.batch(ctx, "renew run leases", func(tx *bolt.Tx) error {
		n = 0
		runs := tx.Bucket(bucketRuns)
		var mine []Run
		if err := tx.Bucket(bucketRunning).ForEach(func(id, _ []byte) error {
			var r Run
			if getJSON(runs, id, "run", &r) == nil && r.Phase == PhaseRunning && r.LeaseOwner == owner {
				mine = append(mine, r)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, r := range mine {
			r.LeaseUntil = until
			if err := putJSON(runs, []byte(r.ID), r); err != nil {
				return fmt.Errorf("run %q: %w", r.ID, err)
			}
		}
		n = len(mine)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// ReapExpiredRuns ends every RUNNING run whose lease passed before now as FAILED "interrupted"
// (EndedAt = the store's clock) and returns those runs as stored. Runs without a lease are never
// reaped here. Each run is returned by exactly one call, however many replicas reap at once.
func (s *Store) ReapExpiredRuns(ctx context.Context, now time.Time) ([]Run, error) {
	var out []Run
	err := s.update(ctx, "reap expired runs", func(tx *bolt.Tx) error {
		out = nil
		runs, running := tx.Bucket(bucketRuns), tx.Bucket(bucketRunning)
		var expired []Run
		if err := running.ForEach(func(id, _ []byte) error {
			var r Run
			if getJSON(runs, id, "run", &r) != nil {
				return nil // corrupt records stay as they are (see recoverRunsLocked)
			}
			if r.Phase == PhaseRunning && !r.LeaseUntil.IsZero() && r.LeaseUntil.Before(now) {
				expired = append(expired, r)
			}
			return nil
		}); err != nil {
			return err
		}
		ended := s.nowUTC()
		for _, r := range expired {
			r.Phase, r.Error, r.EndedAt, r.LeaseUntil = PhaseFailed, ErrorInterrupted, ended, time.Time{}
			if err := putJSON(runs, []byte(r.ID), r); err != nil {
				return fmt.Errorf("run %q: %w", r.ID, err)
			}
			if err := running.Delete([]byte(r.ID)); err != nil {
				return fmt.Errorf("run %q: %w", r.ID, err)
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// compactOrigin is json.Compact for an origin, so that what is returned equals what is stored.
func compactOrigin(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

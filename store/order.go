package store

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// RunAhead returns the run a turn waits for before it starts, when several replicas share the
// database: the oldest RUNNING run of runID's session that was stored before runID (store order:
// the session's run index here, the run sequence on PostgreSQL — not the clocks) and is leased by
// an owner other than owner ("" counts every owner). Runs a replica queued itself are ordered by
// its own queue, hence the exception. ErrNotFound means the turn may start: no such run, or runID
// is unknown (nothing to keep in order).
//
// The scan is as long as the work in progress: the running list, then the session's run index
// newest first, back to the oldest of the session's running runs.
func (s *Store) RunAhead(ctx context.Context, runID, owner string) (Run, error) {
	var out Run
	found := false
	err := s.view(ctx, "run ahead", func(tx *bolt.Tx) error {
		runs := tx.Bucket(bucketRuns)
		var me Run
		if err := getJSON(runs, []byte(runID), "run", &me); err != nil {
			return err
		}
		others := map[string]Run{}
		if err := tx.Bucket(bucketRunning).ForEach(func(id, _ []byte) error {
			var r Run
			if string(id) == runID || getJSON(runs, id, "run", &r) != nil {
				return nil // a corrupt record is nobody's turn (see recoverRunsLocked)
			}
			if r.SessionID == me.SessionID && r.Phase == PhaseRunning && (owner == "" || r.LeaseOwner != owner) {
				others[r.ID] = r
			}
			return nil
		}); err != nil || len(others) == 0 {
			return err
		}
		passed, seen := false, 0
		return walkBack(tx, bucketSessionRuns, me.SessionID, 0, "run index", func(_, v []byte) (bool, error) {
			id := string(v)
			if id == runID {
				passed = true
			} else if r, ok := others[id]; ok {
				seen++
				if passed {
					out, found = r, true // newest first: the last one seen is the oldest
				}
			}
			return !passed || seen < len(others), nil
		})
	})
	if err != nil {
		return Run{}, err
	}
	if !found {
		return Run{}, fmt.Errorf("store: run ahead of %q: %w", runID, ErrNotFound)
	}
	return out, nil
}

package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CreateRun stores a new run in phase RUNNING. It assigns a random ID when r.ID is empty and sets
// StartedAt when zero; EndedAt, Error and the terminal fields are cleared. An unknown session is
// ErrNotFound, an existing ID ErrConflict.
func (s *Store) CreateRun(ctx context.Context, r Run) (Run, error) {
	r, err := s.prepareRun(r)
	if err != nil {
		return Run{}, fmt.Errorf("store: create run: %w", err)
	}
	// Batched with the other writes of concurrent turns (one fsync for many); the function only
	// reads the transaction and r, so the committer may run it again after a rollback.
	err = s.batch(ctx, "create run", func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get([]byte(r.SessionID)) == nil {
			return fmt.Errorf("session %q: %w", r.SessionID, ErrNotFound)
		}
		return insertRunLocked(tx, r)
	})
	if err != nil {
		return Run{}, err
	}
	return r, nil
}

// prepareRun gives a new run its ID (when empty), phase RUNNING and StartedAt, and clears the
// terminal fields, outside any transaction.
func (s clock) prepareRun(r Run) (Run, error) {
	if r.ID == "" {
		r.ID = newID()
	}
	if err := checkID("run", r.ID); err != nil {
		return Run{}, err
	}
	r.Phase = PhaseRunning
	if r.StartedAt.IsZero() {
		r.StartedAt = s.nowUTC()
	} else {
		r.StartedAt = s.norm(r.StartedAt)
	}
	r.EndedAt = time.Time{}
	r.Error = ""
	r.FinalMessageID = 0
	if !r.LeaseUntil.IsZero() {
		r.LeaseUntil = s.norm(r.LeaseUntil)
	}
	if len(r.Origin) > 0 {
		if !json.Valid(r.Origin) {
			return Run{}, fmt.Errorf("%w: origin is not JSON", ErrInvalid)
		}
		r.Origin = compactOrigin(r.Origin)
	}
	return r, nil
}

// insertRunLocked stores a prepared run of an existing session, indexes it under the session and
// puts it on the running list; an existing ID is ErrConflict.
func insertRunLocked(tx *bolt.Tx, r Run) error {
	runs := tx.Bucket(bucketRuns)
	if runs.Get([]byte(r.ID)) != nil {
		return fmt.Errorf("run %q: %w", r.ID, ErrConflict)
	}
	if err := putJSON(runs, []byte(r.ID), r); err != nil {
		return fmt.Errorf("run %q: %w", r.ID, err)
	}
	idx := tx.Bucket(bucketSessionRuns)
	seq, err := idx.NextSequence()
	if err != nil {
		return fmt.Errorf("run index sequence: %w", err)
	}
	if err := idx.Put(prefixKey(r.SessionID, u64(seq)), []byte(r.ID)); err != nil {
		return fmt.Errorf("index run %q: %w", r.ID, err)
	}
	return tx.Bucket(bucketRunning).Put([]byte(r.ID), nil)
}

// FinishRun moves a RUNNING run to a terminal phase, recording errMsg, finalMessageID and EndedAt.
// A non-terminal phase is ErrInvalid; a run that already finished is ErrConflict (its record is left
// untouched); an unknown run is ErrNotFound.
func (s *Store) FinishRun(ctx context.Context, id string, phase Phase, errMsg string, finalMessageID uint64) (Run, error) {
	if !phase.Terminal() {
		return Run{}, fmt.Errorf("store: finish run %q: %w: phase %q is not terminal", id, ErrInvalid, phase)
	}
	var out Run
	err := s.update(ctx, "finish run", func(tx *bolt.Tx) error {
		runs := tx.Bucket(bucketRuns)
		var r Run
		if err := getJSON(runs, []byte(id), "run", &r); err != nil {
			return err
		}
		if r.Phase.Terminal() {
			return fmt.Errorf("run %q already finished as %s: %w", id, r.Phase, ErrConflict)
		}
		r.Phase = phase
		r.Error = errMsg
		r.FinalMessageID = finalMessageID
		r.EndedAt, r.LeaseUntil = s.nowUTC(), time.Time{}
		if err := putJSON(runs, []byte(id), r); err != nil {
			return fmt.Errorf("run %q: %w", id, err)
		}
		if err := tx.Bucket(bucketRunning).Delete([]byte(id)); err != nil {
			return fmt.Errorf("run %q: %w", id, err)
		}
		out = r
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	return out, nil
}

// ConcludeRun ends a RUNNING run in one transaction: it appends c.Final (when set) as the run's
// final message, moves the run to c.Phase with c.Error, the final message's id, the marker counts and
// EndedAt, and takes it off the running list. Either all of it is stored or none of it, so after a
// crash a final answer never sits under a RUNNING (recovered as FAILED) run, and a COMPLETED run
// always has the metadata its answer was written with. It returns the run and the stored final
// message (zero when c.Final is nil).
//
// A non-terminal phase, negative counts, or a Final that is not an ASSISTANT message of this run are
// ErrInvalid; a run that already finished is ErrConflict (nothing is written); an unknown run is
// ErrNotFound.
func (s *Store) ConcludeRun(ctx context.Context, c Conclusion) (Run, Message, error) {
	op := fmt.Sprintf("conclude run %q", c.RunID)
	if !c.Phase.Terminal() {
		return Run{}, Message{}, fmt.Errorf("store: %s: %w: phase %q is not terminal", op, ErrInvalid, c.Phase)
	}
	if c.MarkersSeen < 0 || c.MarkersKept < 0 || c.MarkersDropped < 0 {
		return Run{}, Message{}, fmt.Errorf("store: %s: %w: negative marker count", op, ErrInvalid)
	}
	var final Message
	if c.Final != nil {
		if c.Final.Role != RoleAssistant || len(c.Final.ToolCalls) > 0 || c.Final.RunID != c.RunID {
			return Run{}, Message{}, fmt.Errorf("store: %s: %w: the final message must be an ASSISTANT answer of this run", op, ErrInvalid)
		}
		var err error
		if final, err = s.prepareMessage(*c.Final); err != nil {
			return Run{}, Message{}, fmt.Errorf("store: %s: %w", op, err)
		}
	}
	var outRun Run
	var outMsg Message
	// Batch is safe: a retry starts again from the run record and the prepared message inside a
	// transaction whose earlier attempt was rolled back, so it assigns one id and finishes once.
	err := s.batchSized(ctx, op, payloadSize(final), func(tx *bolt.Tx) error {
		runs := tx.Bucket(bucketRuns)
		var r Run
		if err := getJSON(runs, []byte(c.RunID), "run", &r); err != nil {
			return err
		}
		if r.Phase.Terminal() {
			return fmt.Errorf("run %q already finished as %s: %w", c.RunID, r.Phase, ErrConflict)
		}
		var m Message
		if c.Final != nil {
			if final.SessionID != r.SessionID {
				return fmt.Errorf("%w: final message of session %q for a run of session %q", ErrInvalid, final.SessionID, r.SessionID)
			}
			var err error
			if m, err = s.appendLocked(tx, final); err != nil {
				return err
			}
		}
		r.Phase = c.Phase
		r.Error = c.Error
		r.FinalMessageID = m.ID
		r.MarkersSeen, r.MarkersKept, r.MarkersDropped = c.MarkersSeen, c.MarkersKept, c.MarkersDropped
		r.EndedAt, r.LeaseUntil = s.nowUTC(), time.Time{}
		if err := putJSON(runs, []byte(c.RunID), r); err != nil {
			return fmt.Errorf("run %q: %w", c.RunID, err)
		}
		if err := tx.Bucket(bucketRunning).Delete([]byte(c.RunID)); err != nil {
			return fmt.Errorf("run %q: %w", c.RunID, err)
		}
		outRun, outMsg = r, m
		return nil
	})
	if err != nil {
		return Run{}, Message{}, err
	}
	return outRun, outMsg, nil
}

// SetRunMarkers records a run's citation marker counts (seen in the final content, kept after
// verification, dropped). Negative counts are ErrInvalid; an unknown run is ErrNotFound.
func (s *Store) SetRunMarkers(ctx context.Context, id string, seen, kept, dropped int) error {
	if seen < 0 || kept < 0 || dropped < 0 {
		return fmt.Errorf("store: set run markers %q: %w: negative count", id, ErrInvalid)
	}
	return s.update(ctx, "set run markers", func(tx *bolt.Tx) error {
		runs := tx.Bucket(bucketRuns)
		var r Run
		if err := getJSON(runs, []byte(id), "run", &r); err != nil {
			return err
		}
		r.MarkersSeen, r.MarkersKept, r.MarkersDropped = seen, kept, dropped
		return putJSON(runs, []byte(id), r)
	})
}

// GetRun returns the run with id, or ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id string) (Run, error) {
	var r Run
	err := s.view(ctx, "get run", func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketRuns), []byte(id), "run", &r)
	})
	return r, err
}

// ListRuns returns a session's runs, oldest StartedAt first (ties in creation order). An unknown
// session is ErrNotFound; a session without runs gets an empty slice.
func (s *Store) ListRuns(ctx context.Context, sessionID string) ([]Run, error) {
	out := []Run{}
	err := s.view(ctx, "list runs", func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get([]byte(sessionID)) == nil {
			return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
		}
		runs := tx.Bucket(bucketRuns)
		return scanPrefix(tx.Bucket(bucketSessionRuns), sessionID, func(_, runID []byte) error {
			var r Run
			if err := getJSON(runs, runID, "run", &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Run) int { return a.StartedAt.Compare(b.StartedAt) })
	return out, nil
}

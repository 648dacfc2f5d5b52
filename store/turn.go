package store

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The per-turn write path. A turn used to make five write transactions (USER message, run,
// tool-calling message, tool message, conclusion); under load each is a wait for a batched commit,
// so a turn's latency, and with a fixed number of concurrent sessions the throughput, followed
// their number. StartTurn and AppendMessages cut it to three (start, one per tool round,
// conclusion) without changing what any reader finds while a run is live: the run and its question
// exist before the run emits anything, and a round's tool results are committed before the
// tool.finished events that make readers (the channel reply pump's link set) look for them.

// StartTurn stores the user's turn in one transaction: m as its session's next USER message and r
// as a new RUNNING run pointing at it (UserMessageID). It is CreateRun and AppendMessage together,
// so no crash leaves a run without its question or a question written by a run that was never
// recorded. r gets an ID when it has none; m.RunID is set to it and r.SessionID to m.SessionID
// (a different non-empty value is ErrInvalid). r.StartedAt defaults to the message's CreatedAt.
//
// m must be a USER message (ErrInvalid); an unknown session is ErrNotFound; an existing run ID is
// ErrConflict and nothing is written.
func (s *Store) StartTurn(ctx context.Context, m Message, r Run) (Message, Run, error) {
	m, r, err := s.prepareTurn(m, r)
	if err != nil {
		return Message{}, Run{}, fmt.Errorf("store: start turn: %w", err)
	}
	var outMsg Message
	var outRun Run
	// Batch is safe: each attempt starts from the prepared values and draws the message id inside
	// the transaction that commits it; a rolled-back attempt leaves nothing behind.
	err = s.batchSized(ctx, "start turn", payloadSize(m), func(tx *bolt.Tx) error {
		msg, err := s.appendLocked(tx, m)
		if err != nil {
			return err
		}
		run := r
		run.UserMessageID = msg.ID
		if err := insertRunLocked(tx, run); err != nil {
			return err
		}
		outMsg, outRun = msg, run
		return nil
	})
	if err != nil {
		return Message{}, Run{}, err
	}
	return outMsg, outRun, nil
}

// prepareTurn checks and completes StartTurn's arguments outside any transaction.
func (s clock) prepareTurn(m Message, r Run) (Message, Run, error) {
	if m.Role != RoleUser {
		return Message{}, Run{}, fmt.Errorf("%w: a turn starts with a USER message, not %q", ErrInvalid, m.Role)
	}
	if r.SessionID != "" && r.SessionID != m.SessionID {
		return Message{}, Run{}, fmt.Errorf("%w: run of session %q for a message of session %q", ErrInvalid, r.SessionID, m.SessionID)
	}
	if m.RunID != "" && r.ID != "" && m.RunID != r.ID {
		return Message{}, Run{}, fmt.Errorf("%w: message of run %q for run %q", ErrInvalid, m.RunID, r.ID)
	}
	if r.ID == "" {
		r.ID = m.RunID
	}
	m, err := s.prepareMessage(m)
	if err != nil {
		return Message{}, Run{}, err
	}
	r.SessionID = m.SessionID
	if r.StartedAt.IsZero() {
		r.StartedAt = m.CreatedAt
	}
	if r, err = s.prepareRun(r); err != nil {
		return Message{}, Run{}, err
	}
	m.RunID = r.ID
	return m, r, nil
}

// AppendMessages stores ms, in order, as the next messages of one session in a single transaction:
// either all of them are stored or none. Each is checked and completed as by AppendMessage (ids
// assigned in order, CreatedAt defaulted, metadata compacted), and the session's UpdatedAt is
// bumped once. A tool round (the tool-calling ASSISTANT message and its TOOL results) is written
// this way. An empty ms writes nothing; messages of different sessions are ErrInvalid; an unknown
// session is ErrNotFound.
func (s *Store) AppendMessages(ctx context.Context, ms []Message) ([]Message, error) {
	in, err := s.prepareMessages(ms)
	if err != nil {
		return nil, fmt.Errorf("store: append messages: %w", err)
	}
	if len(in) == 0 {
		return []Message{}, nil
	}
	var out []Message
	// Batch is safe for the same reason as AppendMessage's: ids are drawn in the committing
	// transaction, from the prepared input.
	err = s.batchSized(ctx, "append messages", payloadSize(in...), func(tx *bolt.Tx) error {
		var err error
		out, err = s.appendManyLocked(tx, in)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// prepareMessages checks a batch of one session's messages outside any transaction.
func (s clock) prepareMessages(ms []Message) ([]Message, error) {
	out := make([]Message, len(ms))
	for i, m := range ms {
		if i > 0 && m.SessionID != ms[0].SessionID {
			return nil, fmt.Errorf("%w: messages of sessions %q and %q in one append", ErrInvalid, ms[0].SessionID, m.SessionID)
		}
		p, err := s.prepareMessage(m)
		if err != nil {
			return nil, fmt.Errorf("message %d of %d: %w", i+1, len(ms), err)
		}
		out[i] = p
	}
	return out, nil
}

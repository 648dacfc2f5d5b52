package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Inbound is one chat-platform message as AcceptInbound takes it: its dedup key, the conversation
// it belongs to, what to do when that conversation has no session yet, and (for an ordinary message,
// not a command) the user's turn to queue.
type Inbound struct {
	// SeenKey identifies the platform message ("msg:feishu:om_1"); SeenTTL is how long it is
	// remembered. Both are required, as for MarkSeen.
	SeenKey string
	SeenTTL time.Duration
	// Conversation is the conversation key ("feishu:oc_123") whose bound session the message
	// belongs to. Required.
	Conversation string
	// Create, when set, is the session created and bound when the conversation has none (its ID,
	// when empty, is assigned; CreatedAt and UpdatedAt are set as by CreateSession). Nil leaves an
	// unbound conversation unbound.
	Create *Session
	// Fresh creates Create and binds the conversation to it even when a session is bound already
	// (the /new command). It needs Create.
	Fresh bool
	// Turn, when set, is the user's message to queue in the conversation's session: a USER message
	// and a RUNNING run pointing at it, which the agent then runs (agent.Turn.UserMessageID). It
	// needs a session: a bound one, or Create.
	Turn *InboundTurn
}

// InboundTurn is the user's turn AcceptInbound queues.
type InboundTurn struct {
	RunID   string // assigned when empty
	Channel string // recorded on the run
	Text    string // the USER message's content; must not be blank
	// Origin is recorded on the run (Run.Origin): the platform message, so that another replica
	// can tell the conversation if the one executing the run dies.
	Origin json.RawMessage
}

// Accepted is what AcceptInbound did.
type Accepted struct {
	// Duplicate reports a live duplicate of SeenKey: nothing was written and the other fields are
	// zero.
	Duplicate bool
	// SessionID is the conversation's session after the call ("" when it has none and none was
	// created); SessionCreated reports that this call created and bound it.
	SessionID      string
	SessionCreated bool
	// Run and UserMessage are the queued turn (zero without Inbound.Turn).
	Run         Run
	UserMessage Message
}

// AcceptInbound takes one chat-platform message in a single transaction: it records the dedup key,
// resolves the conversation's session (creating and binding Create when there is none, or always
// with Fresh), and queues the user's turn (a USER message and a RUNNING run). Either all of it is
// stored or none of it, so no message is ever marked seen without also being queued: after a crash
// a redelivery is either a duplicate of a stored turn (which recovery marks FAILED if it never ran)
// or processed afresh. Concurrent first messages of a conversation share one session, because each
// transaction sees the binding the previous one made.
//
// A live duplicate returns Accepted{Duplicate: true} and writes nothing. A malformed Inbound is
// ErrInvalid; a Turn for a conversation without a session and without Create is ErrNotFound (and
// nothing is written, the dedup key included).
func (s *Store) AcceptInbound(ctx context.Context, in Inbound) (Accepted, error) {
	const op = "accept inbound"
	if err := checkInbound(&in); err != nil {
		return Accepted{}, fmt.Errorf("store: %s: %w", op, err)
	}
	now := s.now()
	expiry := u64(uint64(now.Add(in.SeenTTL).UnixNano()))
	var sess Session
	if in.Create != nil {
		var err error
		if sess, err = s.prepareSession(*in.Create); err != nil {
			return Accepted{}, fmt.Errorf("store: %s: %w", op, err)
		}
	}
	var run Run
	var user Message
	if in.Turn != nil {
		var err error
		if run, err = s.prepareRun(Run{ID: in.Turn.RunID, Channel: in.Turn.Channel, Origin: in.Turn.Origin}); err != nil {
			return Accepted{}, fmt.Errorf("store: %s: %w", op, err)
		}
		// The session id is known only inside the transaction; the rest of the message is final.
		user = Message{RunID: run.ID, Role: RoleUser, Content: in.Turn.Text, CreatedAt: run.StartedAt}
	}
	var out Accepted
	// Batch is safe: every attempt starts from out reset and from values prepared outside the
	// transaction (ids included), and reads the dedup key and the binding in the transaction that
	// commits, so a retry does what one run would have done.
	err := s.batchSized(ctx, op, payloadSize(user), func(tx *bolt.Tx) error {
		out = Accepted{}
		seen := tx.Bucket(bucketSeen)
		if v := seen.Get([]byte(in.SeenKey)); v != nil && !expired(v, now) {
			out.Duplicate = true
			return nil
		}
		if err := seen.Put([]byte(in.SeenKey), expiry); err != nil {
			return fmt.Errorf("seen %q: %w", in.SeenKey, err)
		}
		convs := tx.Bucket(bucketConversations)
		if v := convs.Get([]byte(in.Conversation)); v != nil && !in.Fresh {
			out.SessionID = string(v)
		} else if in.Create != nil {
			if err := insertSessionLocked(tx, sess); err != nil {
				return err
			}
			if err := convs.Put([]byte(in.Conversation), []byte(sess.ID)); err != nil {
				return fmt.Errorf("bind conversation %q: %w", in.Conversation, err)
			}
			out.SessionID, out.SessionCreated = sess.ID, true
		}
		if in.Turn == nil {
			return nil
		}
		if out.SessionID == "" {
			return fmt.Errorf("conversation %q has no session: %w", in.Conversation, ErrNotFound)
		}
		u := user
		u.SessionID = out.SessionID
		m, err := s.appendLocked(tx, u)
		if err != nil {
			return err
		}
		r := run
		r.SessionID, r.UserMessageID = out.SessionID, m.ID
		if err := insertRunLocked(tx, r); err != nil {
			return err
		}
		out.Run, out.UserMessage = r, m
		return nil
	})
	if err != nil {
		return Accepted{}, err
	}
	return out, nil
}

// checkInbound rejects a malformed Inbound before any transaction.
func checkInbound(in *Inbound) error {
	switch {
	case in.SeenKey == "":
		return fmt.Errorf("%w: empty dedup key", ErrInvalid)
	case in.SeenTTL <= 0:
		return fmt.Errorf("%w: dedup ttl must be positive, got %s", ErrInvalid, in.SeenTTL)
	case in.Conversation == "":
		return fmt.Errorf("%w: empty conversation key", ErrInvalid)
	case in.Fresh && in.Create == nil:
		return fmt.Errorf("%w: a fresh session needs a session to create", ErrInvalid)
	case in.Turn != nil && strings.TrimSpace(in.Turn.Text) == "":
		return fmt.Errorf("%w: empty message", ErrInvalid)
	}
	return nil
}

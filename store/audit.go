package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// The audit log records what operators do with other people's conversations (opening a share,
// revoking one, exporting the log) and every change of the operator role, whether made by the
// command line or through the admin socket. Entries are only ever appended: there is no method to
// change or delete one. Their ids come from the bucket's sequence, so they are strictly increasing
// and list in the order the actions happened.

// Audit actions.
const (
	AuditShareView      = "share.view"   // an operator opened a share in the console
	AuditShareRevoke    = "share.revoke" // an operator revoked someone's share
	AuditExport         = "audit.export" // an operator downloaded the audit log
	AuditOperatorGrant  = "role.grant"   // a user was given the operator role
	AuditOperatorRevoke = "role.revoke"  // a user lost the operator role
)

// Limits of an audit entry's free-text fields (in characters); longer values are ErrInvalid.
const (
	maxAuditField  = 256
	maxAuditDetail = 2000
)

// Actor is who did an audited action: an operator (ID is their user id, Name their name) or the
// command line (ID empty, Name such as "cli:root", naming the operating-system account).
type Actor struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
}

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	ID   uint64    `json:"id"`
	Time time.Time `json:"time"`
	// ActorID is the operator's user id; empty when the command line acted.
	ActorID string `json:"actorId,omitempty"`
	// Actor names who acted: the operator's name, or "cli:<account>".
	Actor  string `json:"actor"`
	Action string `json:"action"`
	// Target is what the action concerned: a share id, a user name, or "" (exports).
	Target string `json:"target,omitempty"`
	// Detail is a human-readable note (the share's chat and owner, the export's format).
	Detail string `json:"detail,omitempty"`
}

// AppendAudit stores e with a new id and the store's time (e.ID and e.Time are ignored) and
// returns it as stored. Actor and Action are required (ErrInvalid).
func (s *Store) AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	var out AuditEntry
	err := s.update(ctx, "append audit", func(tx *bolt.Tx) error {
		var err error
		out, err = s.appendAuditLocked(tx, e)
		return err
	})
	return out, err
}

func (s *Store) appendAuditLocked(tx *bolt.Tx, e AuditEntry) (AuditEntry, error) {
	if err := checkAudit(e); err != nil {
		return AuditEntry{}, fmt.Errorf("audit: %w", err)
	}
	b := tx.Bucket(bucketAudit)
	id, err := b.NextSequence()
	if err != nil {
		return AuditEntry{}, fmt.Errorf("audit: %w", err)
	}
	e.ID, e.Time = id, s.nowUTC()
	if err := putJSON(b, u64(id), e); err != nil {
		return AuditEntry{}, fmt.Errorf("audit %d: %w", id, err)
	}
	return e, nil
}

func checkAudit(e AuditEntry) error {
	if strings.TrimSpace(e.Actor) == "" {
		return fmt.Errorf("%w: audit entry without an actor", ErrInvalid)
	}
	if strings.TrimSpace(e.Action) == "" {
		return fmt.Errorf("%w: audit entry without an action", ErrInvalid)
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"actor id", e.ActorID, maxAuditField}, {"actor", e.Actor, maxAuditField}, {"action", e.Action, maxAuditField},
		{"target", e.Target, maxAuditField}, {"detail", e.Detail, maxAuditDetail}} {
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("%w: audit %s is not valid UTF-8", ErrInvalid, f.name)
		}
		if n := utf8.RuneCountInString(f.v); n > f.max {
			return fmt.Errorf("%w: audit %s has %d characters, at most %d allowed", ErrInvalid, f.name, n, f.max)
		}
		if f.name != "detail" && strings.IndexFunc(f.v, unicode.IsControl) >= 0 {
			return fmt.Errorf("%w: audit %s contains control characters", ErrInvalid, f.name)
		}
	}
	return nil
}

// ListAudit returns up to limit entries older than before (0: from the newest), newest first. The
// console pages back through the log with the smallest id it was given.
func (s *Store) ListAudit(ctx context.Context, before uint64, limit int) ([]AuditEntry, error) {
	out := []AuditEntry{}
	if limit <= 0 {
		return out, nil
	}
	err := s.view(ctx, "list audit", func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		var k, v []byte
		if before == 0 {
			k, v = c.Last()
		} else {
			k, v = c.Seek(u64(before))
			if k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		}
		for ; k != nil && len(out) < limit; k, v = c.Prev() {
			if before != 0 && binary.BigEndian.Uint64(k) >= before {
				continue
			}
			e, err := decodeAudit(k, v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AuditSince returns up to limit entries newer than after, oldest first: an export reads the whole
// log in pages this way, each page one short read transaction.
func (s *Store) AuditSince(ctx context.Context, after uint64, limit int) ([]AuditEntry, error) {
	out := []AuditEntry{}
	if limit <= 0 {
		return out, nil
	}
	err := s.view(ctx, "audit since", func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			if after == ^uint64(0) {
				break // after+1 wrapped to 0: nothing is newer than the largest id
			}
			e, err := decodeAudit(k, v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func decodeAudit(k, v []byte) (AuditEntry, error) {
	var e AuditEntry
	if len(k) != 8 {
		return e, fmt.Errorf("audit: malformed key %x", k)
	}
	if err := json.Unmarshal(v, &e); err != nil {
		return e, fmt.Errorf("decode audit entry %d: %w", binary.BigEndian.Uint64(k), err)
	}
	return e, nil
}

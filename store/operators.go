package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Operators are users who review what other users chose to share. What they may reach is bounded
// by the shares themselves: the methods here list and open shares, never sessions, so nothing that
// was not shared is ever in their hands. Every role change and every operator action that touches
// someone else's share is written to the audit log (audit.go), in the same transaction as the change
// where there is one, so the log cannot miss an action that happened.

// roleAudit is the audit entry of a role change of u.
func roleAudit(by Actor, u User, grant bool, detail string) AuditEntry {
	action := AuditOperatorRevoke
	if grant {
		action = AuditOperatorGrant
	}
	return AuditEntry{ActorID: by.ID, Actor: by.Name, Action: action, Target: u.Name, Detail: detail}
}

// SetOperator gives the named user the operator role (operator=true) or takes it away, and
// reports whether anything changed. A change is audited in the same transaction as done by by
// (ErrInvalid when by has no name); setting the role a user already has changes and records
// nothing. Unknown names are ErrNotFound. The change applies to the next request the user makes:
// the gateway reads the role with the user on every request.
func (s *Store) SetOperator(ctx context.Context, name string, operator bool, by Actor) (User, bool, error) {
	var (
		u       User
		changed bool
	)
	err := s.update(ctx, "set operator", func(tx *bolt.Tx) error {
		var err error
		changed = false
		if u, err = userByNameLocked(tx, name); err != nil {
			return err
		}
		if u.Operator == operator {
			return nil
		}
		u.Operator = operator
		if err := putJSON(tx.Bucket(bucketUsers), []byte(u.ID), u); err != nil {
			return fmt.Errorf("user %q: %w", u.ID, err)
		}
		if _, err := s.appendAuditLocked(tx, roleAudit(by, u, operator, "")); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return User{}, false, err
	}
	return u, changed, nil
}

// OperatorShare is one live share as the operator console lists it.
type OperatorShare struct {
	Share
	// Session is the shared session; zero when it no longer exists.
	Session Session
	// Owner is the user who shared it; zero when the user record is gone.
	Owner User
}

// ID is the share's public identifier (the hex sha256 of its token), as ShareEntry.ID.
func (e OperatorShare) ID() string { return e.TokenHash }

// ListAllShares returns every live share of every user, newest first, with its session and
// owner. It carries no share tokens: an operator opens a share through the console (audited), never
// with its owner's link.
func (s *Store) ListAllShares(ctx context.Context) ([]OperatorShare, error) {
	out := []OperatorShare{}
	err := s.view(ctx, "list all shares", func(tx *bolt.Tx) error {
		sessions, users := tx.Bucket(bucketSessions), tx.Bucket(bucketUsers)
		owners := map[string]User{}
		return tx.Bucket(bucketShares).ForEach(func(_, v []byte) error {
			var e OperatorShare
			if err := json.Unmarshal(v, &e.Share); err != nil {
				// The key is a token hash, which stays out of messages like everywhere else.
				return fmt.Errorf("decode share: %w", err)
			}
			if err := getJSON(sessions, []byte(e.SessionID), "session", &e.Session); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			owner, ok := owners[e.OwnerID]
			if !ok {
				if err := getJSON(users, []byte(e.OwnerID), "user", &owner); err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
				owners[e.OwnerID] = owner
			}
			e.Owner = owner
			out = append(out, e)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b OperatorShare) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.TokenHash, b.TokenHash)
	})
	return out, nil
}

// GetShareByID returns the live share whose id (ShareEntry.ID, the hex sha256 of its token) is id;
// unknown and revoked ids are ErrNotFound.
func (s *Store) GetShareByID(ctx context.Context, id string) (Share, error) {
	var sh Share
	err := s.view(ctx, "get share by id", func(tx *bolt.Tx) error {
		if err := getJSON(tx.Bucket(bucketShares), []byte(id), "share", &sh); err != nil {
			return fmt.Errorf("share: %w", unwrapNotFound(err))
		}
		return nil
	})
	return sh, err
}

// RevokeShareAsOperator revokes the share with id whoever owns it and records audit (its Action
// and Target are set here) in the same transaction, so a revocation is never missing from the log.
// Unknown and already revoked ids are ErrNotFound.
func (s *Store) RevokeShareAsOperator(ctx context.Context, id string, audit AuditEntry) (Share, error) {
	var sh Share
	err := s.update(ctx, "revoke share as operator", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketShares)
		key := []byte(id)
		if err := getJSON(b, key, "share", &sh); err != nil {
			return fmt.Errorf("share: %w", unwrapNotFound(err))
		}
		if err := tx.Bucket(bucketUserShares).Delete(prefixKey(sh.OwnerID, key)); err != nil {
			return err
		}
		if err := b.Delete(key); err != nil {
			return err
		}
		audit.Action, audit.Target = AuditShareRevoke, id
		_, err := s.appendAuditLocked(tx, audit)
		return err
	})
	if err != nil {
		return Share{}, err
	}
	return sh, nil
}

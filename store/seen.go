package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MarkSeen records a chat platform's message key for ttl. It returns true when the key is new or its
// previous record has expired (the caller should process the message), recording the expiry
// now+ttl; it returns false for a live duplicate and leaves that key's expiry as it was, so endless
// redeliveries cannot keep a key alive forever. ttl must be positive and key non-empty (ErrInvalid).
func (s *Store) MarkSeen(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if key == "" {
		return false, fmt.Errorf("store: mark seen: %w: empty key", ErrInvalid)
	}
	if ttl <= 0 {
		return false, fmt.Errorf("store: mark seen: %w: ttl must be positive, got %s", ErrInvalid, ttl)
	}
	now := s.now()
	expiry := u64(uint64(now.Add(ttl).UnixNano()))
	var fresh bool
	// Batch is safe: a retry re-reads the key in the transaction that commits, so the answer always
	// matches what was committed.
	err := s.batch(ctx, "mark seen", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSeen)
		if v := b.Get([]byte(key)); v != nil && !expired(v, now) {
			fresh = false
			return nil
		}
		fresh = true
		return b.Put([]byte(key), expiry)
	})
	if err != nil {
		return false, err
	}
	return fresh, nil
}

// PruneSeen deletes expired dedup keys and returns how many it removed.
func (s *Store) PruneSeen(ctx context.Context) (int, error) {
	now := s.now()
	n := 0
	err := s.update(ctx, "prune seen", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSeen)
		var dead [][]byte
		// Collect first: deleting while a cursor walks the bucket can skip keys.
		if err := b.ForEach(func(k, v []byte) error {
			if expired(v, now) {
				dead = append(dead, bytes.Clone(k))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range dead {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(dead)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// expired reports whether a stored expiry is not after now. A malformed value counts as expired so
// a corrupt record is overwritten or pruned instead of blocking the key forever.
func expired(v []byte, now time.Time) bool {
	if len(v) != 8 {
		return true
	}
	return int64(binary.BigEndian.Uint64(v)) <= now.UnixNano()
}

// UnmarkSeen forgets a message key recorded by MarkSeen, so that a redelivery of the message is
// processed. The dispatcher calls it when a message it marked could not be queued. Forgetting a
// key that is not there is not an error.
func (s *Store) UnmarkSeen(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("store: unmark seen: %w: empty key", ErrInvalid)
	}
	return s.update(ctx, "unmark seen", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSeen).Delete([]byte(key))
	})
}

package store

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ListMessagesAfter returns up to limit of a session's messages with ids above afterID (0: from the
// first), in ascending id order; the next page is ListMessagesAfter(…, out[len(out)-1].ID, …). It
// seeks the session's index to the cursor, so a page costs the same anywhere in a long session, and
// a reader that walks a session page by page (an export) holds one page, not the session, and no
// read transaction between pages. limit ≤ 0 is ErrInvalid; an unknown session is ErrNotFound.
func (s *Store) ListMessagesAfter(ctx context.Context, sessionID string, afterID uint64, limit int) ([]Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("store: list messages after: %w: limit must be positive", ErrInvalid)
	}
	out := []Message{}
	err := s.view(ctx, "list messages after", func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get([]byte(sessionID)) == nil {
			return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
		}
		msgs := tx.Bucket(bucketMessages)
		p := prefixKey(sessionID, nil)
		c := tx.Bucket(bucketSessionMessages).Cursor()
		// The first key past afterID: ids are big-endian, so afterID+1 seeks exactly there (an
		// afterID of MaxUint64 wraps to 0 and would restart; nothing lies past it anyway).
		if afterID == ^uint64(0) {
			return nil
		}
		for k, _ := c.Seek(prefixKey(sessionID, u64(afterID+1))); k != nil && bytes.HasPrefix(k, p) && len(out) < limit; k, _ = c.Next() {
			suffix := k[len(p):]
			if len(suffix) != 8 {
				return fmt.Errorf("corrupt message index key for session %q", sessionID)
			}
			var m Message
			if err := getJSON(msgs, suffix, "message", &m); err != nil {
				return err
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

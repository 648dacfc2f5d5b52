package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// What a share covers and how often it was opened.
//
// A share is a snapshot up to its watermark (a message id), which means little to the person who
// made it. So every share records, when it is created or moved forward, how many messages its page
// shows (questions and answers, the dialog kinds of the message index, exactly what the share page
// renders) and when the newest of them was written: "6 messages, up to 14:03". Messages at or below
// the watermark never change, so the figures never go stale and listing shares reads no messages.
//
// Views are counted by the gateway and handed over in batches (AddShareViews): a share page is
// read far more often than anything else is written, and one small write transaction per batch
// instead of per view keeps a busy link from queueing behind the chat's own writes. Increments are
// additive in the store (a read-modify-write inside one bbolt write transaction, an
// "UPDATE … SET views = views + n" on PostgreSQL), so concurrent batches from any number of
// replicas lose nothing.

// ShareStats is what a share covers and how often it was viewed.
type ShareStats struct {
	// Messages is how many messages the share page shows (USER messages and ASSISTANT answers with
	// ids up to the watermark).
	Messages int `json:"messages,omitempty"`
	// WatermarkAt is when the watermark message was written (zero when it no longer exists).
	WatermarkAt time.Time `json:"watermarkAt,omitzero"`
	// Views counts share page renders (see the gateway for what counts), LastViewedAt the newest.
	Views        uint64    `json:"views,omitempty"`
	LastViewedAt time.Time `json:"lastViewedAt,omitzero"`
}

// ShareViews is a batch of views of one share: Count renders, the newest at Last.
type ShareViews struct {
	// ID is the share's id (ShareEntry.ID, the hex sha256 of its token).
	ID    string
	Count uint64
	Last  time.Time
}

// mergeShareViews sums a batch per share id (dropping empty counts), sorted by id so that
// concurrent writers on PostgreSQL lock rows in the same order.
func mergeShareViews(in []ShareViews) []ShareViews {
	out := make([]ShareViews, 0, len(in))
	idx := make(map[string]int, len(in))
	for _, v := range in {
		if v.Count == 0 || v.ID == "" {
			continue
		}
		v.Last = v.Last.UTC()
		if i, ok := idx[v.ID]; ok {
			out[i].Count += v.Count
			if v.Last.After(out[i].Last) {
				out[i].Last = v.Last
			}
			continue
		}
		idx[v.ID] = len(out)
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b ShareViews) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// AddShareViews adds each batch's count to its share and moves the share's last-viewed time
// forward (never back), all in one transaction. Ids of shares that no longer exist (revoked since
// the view) are skipped: a revoked link has no figures to keep.
func (s *Store) AddShareViews(ctx context.Context, views []ShareViews) error {
	views = mergeShareViews(views)
	if len(views) == 0 {
		return nil
	}
	return s.update(ctx, "add share views", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketShares)
		for _, v := range views {
			raw := b.Get([]byte(v.ID))
			if raw == nil {
				continue
			}
			var sh Share
			if err := json.Unmarshal(raw, &sh); err != nil {
				return fmt.Errorf("share: %w", err) // never echo the key
			}
			sh.Views += v.Count
			if v.Last.After(sh.LastViewedAt) {
				sh.LastViewedAt = v.Last
			}
			if err := putJSON(b, []byte(v.ID), sh); err != nil {
				return fmt.Errorf("share: %w", err)
			}
		}
		return nil
	})
}

// AdvanceShare moves ownerID's live share id forward to watermark ("update to include newer
// messages"): the same link then shows the conversation up to the new watermark, and its coverage
// is recorded afresh; views are kept. A watermark below the share's is ErrInvalid (an update never
// hides what the link already showed) and one that is no message of the shared session is
// ErrInvalid too. Not ownerID's share, or no such share, is ErrNotFound.
func (s *Store) AdvanceShare(ctx context.Context, id, ownerID string, watermark uint64) (Share, error) {
	var sh Share
	err := s.update(ctx, "advance share", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketShares)
		if err := getJSON(b, []byte(id), "share", &sh); err != nil {
			return fmt.Errorf("share: %w", unwrapNotFound(err))
		}
		if sh.OwnerID != ownerID {
			return fmt.Errorf("share: %w", ErrNotFound)
		}
		if watermark < sh.Watermark {
			return fmt.Errorf("share: %w: watermark %d is below the share's %d", ErrInvalid, watermark, sh.Watermark)
		}
		if tx.Bucket(bucketSessionMessages).Get(prefixKey(sh.SessionID, u64(watermark))) == nil {
			return fmt.Errorf("share: %w: message %d is not in the shared session", ErrInvalid, watermark)
		}
		msgs, at, err := shareCoverageLocked(tx, sh.SessionID, watermark)
		if err != nil {
			return err
		}
		sh.Watermark, sh.Messages, sh.WatermarkAt = watermark, msgs, at
		return putJSON(b, []byte(id), sh)
	})
	if err != nil {
		return Share{}, err
	}
	return sh, nil
}

// shareCoverageLocked counts the dialog messages of sessionID with ids up to watermark from the
// message index (the kind byte, no message decoded unless its entry predates kinds) and reads the
// watermark message's time.
func shareCoverageLocked(tx *bolt.Tx, sessionID string, watermark uint64) (int, time.Time, error) {
	prefix := prefixKey(sessionID, nil)
	msgs := tx.Bucket(bucketMessages)
	n := 0
	c := tx.Bucket(bucketSessionMessages).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		suffix := k[len(prefix):]
		if len(suffix) != 8 {
			continue
		}
		if binary.BigEndian.Uint64(suffix) > watermark {
			break
		}
		kind := byte(0)
		if len(v) == 1 {
			kind = v[0]
		} else {
			var m Message
			if err := getJSON(msgs, suffix, "message", &m); err != nil {
				continue // a corrupt or missing record is not shown either
			}
			kind = kindOf(m)
		}
		if kind == kindUser || kind == kindAnswer {
			n++
		}
	}
	var at time.Time
	var m Message
	if err := getJSON(msgs, u64(watermark), "message", &m); err == nil {
		at = m.CreatedAt
	}
	return n, at, nil
}

// coverSharesLocked records the coverage of shares created before it was recorded; Open runs it.
// A share done once has a WatermarkAt (or, when its watermark message is gone, Messages set to
// what remains), so the pass costs one read of the shares bucket afterwards.
func coverSharesLocked(tx *bolt.Tx) error {
	b := tx.Bucket(bucketShares)
	var todo []Share
	err := b.ForEach(func(_, v []byte) error {
		var sh Share
		if json.Unmarshal(v, &sh) != nil {
			return nil // a corrupt record is reported where it is read, never a reason not to start
		}
		if sh.WatermarkAt.IsZero() && sh.Messages == 0 {
			todo = append(todo, sh)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cover shares: %w", err)
	}
	for _, sh := range todo {
		n, at, err := shareCoverageLocked(tx, sh.SessionID, sh.Watermark)
		if err != nil {
			return fmt.Errorf("cover shares: %w", err)
		}
		if n == 0 && at.IsZero() {
			continue // nothing left to describe (the session is gone)
		}
		sh.Messages, sh.WatermarkAt = n, at
		if err := putJSON(b, []byte(sh.TokenHash), sh); err != nil {
			return fmt.Errorf("cover shares: %w", err)
		}
	}
	return nil
}

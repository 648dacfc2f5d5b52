package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Share tokens and where they are kept.
//
// The shares bucket is keyed by sha256(token), so a lookup never compares a presented token with a
// stored one. The token itself is kept in the owner's index (user_shares, value of
// "<ownerID>\x00<hash>") because the owner must be able to find a link again: the share list shows
// each link's URL and sharing a chat twice hands back the live link instead of minting another.
// Keeping it grants nothing to someone who can read the file: a share token opens a read-only
// snapshot of messages that sit in the same file. Shares created before the index existed have an
// empty token there; they are listed without a URL and can be revoked by their id (the hash).

// ShareEntry is one share as its owner lists it.
type ShareEntry struct {
	Share
	// Token is the share's token, "" for a share created before tokens were kept (see above).
	Token string
	// Session is the shared session; zero when it no longer exists (the link then opens nothing).
	Session Session
}

// ID is the share's stable public identifier: the hex sha256 of its token. It names the share in
// lists and revocations without being a credential (GetShare hashes what it is given).
func (e ShareEntry) ID() string { return e.TokenHash }

// CreateShare creates a read-only share of sessionID frozen at watermark (normally the session's
// LastMessageID) and returns the share token (32 random bytes, base64url) with the stored record.
// An unknown session is ErrNotFound. The caller decides who may share a session; the store records
// ownerID so only that owner can revoke.
func (s *Store) CreateShare(ctx context.Context, sessionID, ownerID string, watermark uint64) (string, Share, error) {
	var (
		token string
		sh    Share
	)
	err := s.update(ctx, "create share", func(tx *bolt.Tx) error {
		var err error
		token, sh, err = s.createShareLocked(tx, sessionID, ownerID, watermark)
		return err
	})
	if err != nil {
		return "", Share{}, err
	}
	return token, sh, nil
}

// ShareSession returns ownerID's live share of sessionID frozen at watermark when there is one
// whose token is known (created=false), else creates one (created=true). Look-up and creation are
// one transaction, so two concurrent requests to share the same chat get the same link. A share
// at another watermark is never reused: its snapshot is not the conversation the caller sees now.
func (s *Store) ShareSession(ctx context.Context, sessionID, ownerID string, watermark uint64) (token string, sh Share, created bool, err error) {
	err = s.update(ctx, "share session", func(tx *bolt.Tx) error {
		token, sh, created = "", Share{}, false
		shares := tx.Bucket(bucketShares)
		err := scanPrefix(tx.Bucket(bucketUserShares), ownerID, func(hash, tok []byte) error {
			if token != "" || len(tok) == 0 {
				return nil
			}
			var cand Share
			if err := getJSON(shares, hash, "share", &cand); err != nil {
				return fmt.Errorf("share: %w", unwrapNotFound(err))
			}
			if cand.SessionID == sessionID && cand.Watermark == watermark {
				token, sh = string(tok), cand
			}
			return nil
		})
		if err != nil || token != "" {
			return err
		}
		token, sh, err = s.createShareLocked(tx, sessionID, ownerID, watermark)
		created = err == nil
		return err
	})
	if err != nil {
		return "", Share{}, false, err
	}
	return token, sh, created, nil
}

func (s *Store) createShareLocked(tx *bolt.Tx, sessionID, ownerID string, watermark uint64) (string, Share, error) {
	if tx.Bucket(bucketSessions).Get([]byte(sessionID)) == nil {
		return "", Share{}, fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
	}
	token := randToken(tokenBytes)
	sh := Share{
		TokenHash: hashToken(token),
		SessionID: sessionID,
		OwnerID:   ownerID,
		Watermark: watermark,
		CreatedAt: s.nowUTC(),
	}
	var err error
	if sh.Messages, sh.WatermarkAt, err = shareCoverageLocked(tx, sessionID, watermark); err != nil {
		return "", Share{}, err
	}
	if err := putJSON(tx.Bucket(bucketShares), []byte(sh.TokenHash), sh); err != nil {
		return "", Share{}, err
	}
	if err := tx.Bucket(bucketUserShares).Put(prefixKey(ownerID, []byte(sh.TokenHash)), []byte(token)); err != nil {
		return "", Share{}, err
	}
	return token, sh, nil
}

// GetShare returns the share for token; unknown and revoked tokens are ErrNotFound.
func (s *Store) GetShare(ctx context.Context, token string) (Share, error) {
	var sh Share
	err := s.view(ctx, "get share", func(tx *bolt.Tx) error {
		if err := getJSON(tx.Bucket(bucketShares), []byte(hashToken(token)), "share", &sh); err != nil {
			return fmt.Errorf("share: %w", unwrapNotFound(err))
		}
		return nil
	})
	return sh, err
}

// ListShares returns ownerID's live shares, newest first, each with its token (when kept) and
// its session. It reads the owner's index only, so its cost does not grow with other users' shares.
// An owner without shares gets an empty slice.
func (s *Store) ListShares(ctx context.Context, ownerID string) ([]ShareEntry, error) {
	out := []ShareEntry{}
	err := s.view(ctx, "list shares", func(tx *bolt.Tx) error {
		shares, sessions := tx.Bucket(bucketShares), tx.Bucket(bucketSessions)
		return scanPrefix(tx.Bucket(bucketUserShares), ownerID, func(hash, tok []byte) error {
			var e ShareEntry
			if err := getJSON(shares, hash, "share", &e.Share); err != nil {
				return fmt.Errorf("share: %w", unwrapNotFound(err))
			}
			e.Token = string(tok)
			if err := getJSON(sessions, []byte(e.SessionID), "session", &e.Session); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			out = append(out, e)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b ShareEntry) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.Watermark, a.Watermark)
	})
	return out, nil
}

// RevokeShare deletes the share for token. A token that is unknown, already revoked or owned by
// someone other than ownerID is ErrNotFound, so callers cannot probe other users' shares.
func (s *Store) RevokeShare(ctx context.Context, token, ownerID string) error {
	return s.revoke(ctx, hashToken(token), ownerID)
}

// RevokeShareID is RevokeShare by the share's id (ShareEntry.ID), for links whose token is not
// kept. The same rules apply: not ownerID's share is ErrNotFound.
func (s *Store) RevokeShareID(ctx context.Context, id, ownerID string) error {
	return s.revoke(ctx, id, ownerID)
}

func (s *Store) revoke(ctx context.Context, hash, ownerID string) error {
	return s.update(ctx, "revoke share", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketShares)
		key := []byte(hash)
		var sh Share
		if err := getJSON(b, key, "share", &sh); err != nil {
			return fmt.Errorf("share: %w", unwrapNotFound(err))
		}
		if sh.OwnerID != ownerID {
			return fmt.Errorf("share: %w", ErrNotFound)
		}
		if err := tx.Bucket(bucketUserShares).Delete(prefixKey(sh.OwnerID, key)); err != nil {
			return err
		}
		return b.Delete(key)
	})
}

// indexSharesLocked gives every share an entry in its owner's index; Open runs it so shares
// created before the index existed are listed too (with an empty token, which is unknown). Entries
// that exist are left alone, so it is idempotent and cheap once done.
func indexSharesLocked(tx *bolt.Tx) error {
	idx := tx.Bucket(bucketUserShares)
	var add [][]byte
	err := tx.Bucket(bucketShares).ForEach(func(k, v []byte) error {
		var sh Share
		if err := json.Unmarshal(v, &sh); err != nil {
			return nil // a corrupt record is reported where it is read, never a reason not to start
		}
		key := prefixKey(sh.OwnerID, k)
		if k, _ := idx.Cursor().Seek(key); !bytes.Equal(k, key) {
			add = append(add, key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("index shares: %w", err)
	}
	for _, key := range add {
		if err := idx.Put(key, []byte{}); err != nil {
			return fmt.Errorf("index shares: %w", err)
		}
	}
	return nil
}

// unwrapNotFound replaces a not-found error naming the token hash with plain ErrNotFound, so share
// errors never echo key material; other errors pass through.
func unwrapNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return ErrNotFound
	}
	return err
}

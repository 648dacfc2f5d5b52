package store

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// CreateShare creates a read-only share of sessionID frozen at watermark (normally the session's
// LastMessageID) and returns the share token (32 random bytes, base64url) with the stored record.
// Only sha256(token) is stored. An unknown session is ErrNotFound. The caller decides who may share
// a session; the store records ownerID so only that owner can revoke.
func (s *Store) CreateShare(ctx context.Context, sessionID, ownerID string, watermark uint64) (string, Share, error) {
	token := randToken(tokenBytes)
	sh := Share{
		TokenHash: hashToken(token),
		SessionID: sessionID,
		OwnerID:   ownerID,
		Watermark: watermark,
		CreatedAt: s.nowUTC(),
	}
	err := s.update(ctx, "create share", func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get([]byte(sessionID)) == nil {
			return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
		}
		return putJSON(tx.Bucket(bucketShares), []byte(sh.TokenHash), sh)
	})
	if err != nil {
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

// RevokeShare deletes the share for token. A token that is unknown, already revoked or owned by
// someone other than ownerID is ErrNotFound, so callers cannot probe other users' shares.
func (s *Store) RevokeShare(ctx context.Context, token, ownerID string) error {
	return s.update(ctx, "revoke share", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketShares)
		key := []byte(hashToken(token))
		var sh Share
		if err := getJSON(b, key, "share", &sh); err != nil {
			return fmt.Errorf("share: %w", unwrapNotFound(err))
		}
		if sh.OwnerID != ownerID {
			return fmt.Errorf("share: %w", ErrNotFound)
		}
		return b.Delete(key)
	})
}

// unwrapNotFound replaces a not-found error naming the token hash with plain ErrNotFound, so share
// errors never echo key material; other errors pass through.
func unwrapNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return ErrNotFound
	}
	return err
}

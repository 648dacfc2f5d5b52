package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func TestShares(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "citegate.db")
	clock := newClock()
	s := openAt(t, path, clock)
	sess := newSession(t, s, "alice")
	for range 3 {
		_, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: "x"})
		require.NoError(t, err)
	}
	wm, err := s.LastMessageID(ctx, sess.ID)
	require.NoError(t, err)

	token, sh, err := s.CreateShare(ctx, sess.ID, "alice", wm)
	require.NoError(t, err)
	raw, err := base64.RawURLEncoding.DecodeString(token)
	require.NoError(t, err)
	assert.Len(t, raw, 32, "at least 128 random bits")
	assert.Equal(t, Share{TokenHash: hashToken(token), SessionID: sess.ID, OwnerID: "alice", Watermark: wm,
		CreatedAt: clock.Now()}, sh)

	got, err := s.GetShare(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, sh, got)

	// Messages after the share do not move its watermark.
	_, err = s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: "later"})
	require.NoError(t, err)
	got, err = s.GetShare(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, wm, got.Watermark)

	token2, _, err := s.CreateShare(ctx, sess.ID, "alice", wm)
	require.NoError(t, err)
	assert.NotEqual(t, token, token2)

	_, _, err = s.CreateShare(ctx, "nope", "alice", 1)
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = s.GetShare(ctx, "unknown-token")
	assert.ErrorIs(t, err, ErrNotFound)

	// Only hashes are stored.
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketShares).ForEach(func(k, v []byte) error {
			assert.NotEqual(t, token, string(k))
			assert.False(t, bytes.Contains(v, []byte(token)))
			return nil
		})
	}))

	// Shares survive a restart.
	require.NoError(t, s.Close())
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.False(t, bytes.Contains(file, []byte(token)), "share token stored in clear")
	s = openAt(t, path, clock)
	got, err = s.GetShare(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, sh, got)

	// Revoking: someone else's or an unknown token is not found and changes nothing.
	err = s.RevokeShare(ctx, token, "mallory")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = s.GetShare(ctx, token)
	require.NoError(t, err, "still there after a stranger's revoke")
	assert.ErrorIs(t, s.RevokeShare(ctx, "unknown-token", "alice"), ErrNotFound)

	require.NoError(t, s.RevokeShare(ctx, token, "alice"))
	_, err = s.GetShare(ctx, token)
	assert.ErrorIs(t, err, ErrNotFound, "revoked reads as not found")
	assert.ErrorIs(t, s.RevokeShare(ctx, token, "alice"), ErrNotFound, "second revoke")
	_, err = s.GetShare(ctx, token2)
	require.NoError(t, err, "other shares unaffected")

	require.NoError(t, s.Close())
	s = openAt(t, path, clock)
	_, err = s.GetShare(ctx, token)
	assert.ErrorIs(t, err, ErrNotFound, "revocation survives a restart")
	checkConsistency(t, s)
}

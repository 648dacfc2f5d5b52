package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

	// Share records are keyed and hold only the hash; the token is kept in the owner's index alone
	// (see shares.go for why that grants nothing to a reader of the file).
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketShares).ForEach(func(k, v []byte) error {
			assert.NotEqual(t, token, string(k))
			assert.False(t, bytes.Contains(v, []byte(token)))
			return nil
		})
	}))

	// Shares survive a restart.
	require.NoError(t, s.Close())
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

// TestShareListAndReuse: the owner's list (index by owner, newest first, with token and session),
// reuse of a live link at the same watermark, a new link once the chat grew, revoke by token and
// by id, and strangers seeing nothing.
func TestShareListAndReuse(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "citegate.db")
	clock := newClock()
	s := openAt(t, path, clock)
	sess, err := s.CreateSession(ctx, Session{UserID: "alice", Channel: "desktop", Title: "年假"})
	require.NoError(t, err)
	other := newSession(t, s, "bob")
	_, err = s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: "q1"})
	require.NoError(t, err)
	_, err = s.AppendMessage(ctx, Message{SessionID: other.ID, Role: RoleUser, Content: "b"})
	require.NoError(t, err)
	wm1, err := s.LastMessageID(ctx, sess.ID)
	require.NoError(t, err)

	empty, err := s.ListShares(ctx, "alice")
	require.NoError(t, err)
	assert.NotNil(t, empty)
	assert.Empty(t, empty)

	tok1, sh1, created, err := s.ShareSession(ctx, sess.ID, "alice", wm1)
	require.NoError(t, err)
	assert.True(t, created)
	clock.Advance(time.Minute)
	again, sh1b, created, err := s.ShareSession(ctx, sess.ID, "alice", wm1)
	require.NoError(t, err)
	assert.False(t, created, "the same chat at the same watermark: the live link")
	assert.Equal(t, tok1, again)
	assert.Equal(t, sh1, sh1b)
	_, _, _, err = s.ShareSession(ctx, "nope", "alice", 1)
	assert.ErrorIs(t, err, ErrNotFound)

	// Bob's share of his own chat never shows in Alice's list, and the reverse.
	bobTok, _, _, err := s.ShareSession(ctx, other.ID, "bob", 2)
	require.NoError(t, err)

	// The chat grew: a new link at the new watermark; the old one stays live and listed.
	clock.Advance(time.Minute)
	_, err = s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: "q2"})
	require.NoError(t, err)
	wm2, err := s.LastMessageID(ctx, sess.ID)
	require.NoError(t, err)
	tok2, sh2, created, err := s.ShareSession(ctx, sess.ID, "alice", wm2)
	require.NoError(t, err)
	assert.True(t, created)
	assert.NotEqual(t, tok1, tok2)

	list, err := s.ListShares(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, tok2, list[0].Token, "newest first")
	assert.Equal(t, sh2, list[0].Share)
	assert.Equal(t, tok1, list[1].Token)
	assert.Equal(t, wm1, list[1].Watermark)
	assert.Equal(t, "年假", list[0].Session.Title)
	assert.Equal(t, hashToken(tok1), list[1].ID())
	bobs, err := s.ListShares(ctx, "bob")
	require.NoError(t, err)
	require.Len(t, bobs, 1)
	assert.Equal(t, bobTok, bobs[0].Token)

	// Revoking by id: a stranger cannot, the owner can; the index follows.
	assert.ErrorIs(t, s.RevokeShareID(ctx, list[1].ID(), "bob"), ErrNotFound)
	require.NoError(t, s.RevokeShareID(ctx, list[1].ID(), "alice"))
	_, err = s.GetShare(ctx, tok1)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorIs(t, s.RevokeShareID(ctx, list[1].ID(), "alice"), ErrNotFound)
	// A revoked link is not handed out again: sharing at wm1 now mints a new one.
	tok1b, _, created, err := s.ShareSession(ctx, sess.ID, "alice", wm1)
	require.NoError(t, err)
	assert.True(t, created)
	assert.NotEqual(t, tok1, tok1b)
	require.NoError(t, s.RevokeShare(ctx, tok1b, "alice"))
	require.NoError(t, s.RevokeShare(ctx, tok2, "alice"))
	list, err = s.ListShares(ctx, "alice")
	require.NoError(t, err)
	assert.Empty(t, list)
	checkConsistency(t, s)
}

// TestShareIndexBackfill: shares written before the owner index existed are indexed at Open and
// listed without a token; the owner can revoke them by id.
func TestShareIndexBackfill(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "citegate.db")
	clock := newClock()
	s := openAt(t, path, clock)
	sess := newSession(t, s, "alice")
	legacy := Share{TokenHash: hashToken("legacy-token"), SessionID: sess.ID, OwnerID: "alice", Watermark: 7, CreatedAt: clock.Now()}
	raw, err := json.Marshal(legacy)
	require.NoError(t, err)
	// The layout of an older file: a share record and no index entry.
	rawPut(t, s, bucketShares, []byte(legacy.TokenHash), raw)
	rawPut(t, s, bucketShares, []byte(strings.Repeat("f", 64)), []byte("not json")) // ignored, still starts
	require.NoError(t, s.Close())

	s = openAt(t, path, clock)
	list, err := s.ListShares(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, legacy, list[0].Share)
	assert.Empty(t, list[0].Token, "a legacy token is unknown")
	// Open again: the backfill is idempotent.
	require.NoError(t, s.Close())
	s = openAt(t, path, clock)
	list, err = s.ListShares(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, list, 1)
	// A legacy share is never handed out as the live link (its token is unknown).
	tok, _, created, err := s.ShareSession(ctx, sess.ID, "alice", 7)
	require.NoError(t, err)
	assert.True(t, created)
	assert.NotEqual(t, "legacy-token", tok)
	require.NoError(t, s.RevokeShareID(ctx, legacy.TokenHash, "alice"))
	_, err = s.GetShare(ctx, "legacy-token")
	assert.ErrorIs(t, err, ErrNotFound)
	checkConsistency(t, s)
}

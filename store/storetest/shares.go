package storetest

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testShares(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	clock := newClock()
	s := h.openAt(t, path, clock)
	sess := newSession(t, s, "alice")
	for range 3 {
		_, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "x"})
		require.NoError(t, err)
	}
	wm, err := s.LastMessageID(ctx, sess.ID)
	require.NoError(t, err)

	token, sh, err := s.CreateShare(ctx, sess.ID, "alice", wm)
	require.NoError(t, err)
	raw, err := base64.RawURLEncoding.DecodeString(token)
	require.NoError(t, err)
	assert.Len(t, raw, 32, "at least 128 random bits")
	assert.Equal(t, store.Share{TokenHash: hashToken(token), SessionID: sess.ID, OwnerID: "alice", Watermark: wm,
		CreatedAt: clock.Now(), ShareStats: store.ShareStats{Messages: 3, WatermarkAt: clock.Now()}}, sh)

	got, err := s.GetShare(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, sh, got)

	// Messages after the share do not move its watermark.
	_, err = s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "later"})
	require.NoError(t, err)
	got, err = s.GetShare(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, wm, got.Watermark)

	token2, _, err := s.CreateShare(ctx, sess.ID, "alice", wm)
	require.NoError(t, err)
	assert.NotEqual(t, token, token2)

	_, _, err = s.CreateShare(ctx, "nope", "alice", 1)
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetShare(ctx, "unknown-token")
	assert.ErrorIs(t, err, store.ErrNotFound)

	// store.Share records are keyed and hold only the hash; the token is kept in the owner's index alone
	// (see shares.go for why that grants nothing to a reader of the file).
	assert.True(t, h.stored(t, s, "share", hashToken(token)))
	assert.False(t, h.stored(t, s, "share", token))

	// Shares survive a restart.
	require.NoError(t, s.Close())
	s = h.openAt(t, path, clock)
	got, err = s.GetShare(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, sh, got)

	// Revoking: someone else's or an unknown token is not found and changes nothing.
	err = s.RevokeShare(ctx, token, "mallory")
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetShare(ctx, token)
	require.NoError(t, err, "still there after a stranger's revoke")
	assert.ErrorIs(t, s.RevokeShare(ctx, "unknown-token", "alice"), store.ErrNotFound)

	require.NoError(t, s.RevokeShare(ctx, token, "alice"))
	_, err = s.GetShare(ctx, token)
	assert.ErrorIs(t, err, store.ErrNotFound, "revoked reads as not found")
	assert.ErrorIs(t, s.RevokeShare(ctx, token, "alice"), store.ErrNotFound, "second revoke")
	_, err = s.GetShare(ctx, token2)
	require.NoError(t, err, "other shares unaffected")

	require.NoError(t, s.Close())
	s = h.openAt(t, path, clock)
	_, err = s.GetShare(ctx, token)
	assert.ErrorIs(t, err, store.ErrNotFound, "revocation survives a restart")
	h.check(t, s)
}

// TestShareListAndReuse: the owner's list (index by owner, newest first, with token and session),
// reuse of a live link at the same watermark, a new link once the chat grew, revoke by token and
// by id, and strangers seeing nothing.
func testShareListAndReuse(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	clock := newClock()
	s := h.openAt(t, path, clock)
	sess, err := s.CreateSession(ctx, store.Session{UserID: "alice", Channel: "desktop", Title: "年假"})
	require.NoError(t, err)
	other := newSession(t, s, "bob")
	_, err = s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q1"})
	require.NoError(t, err)
	_, err = s.AppendMessage(ctx, store.Message{SessionID: other.ID, Role: store.RoleUser, Content: "b"})
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
	assert.ErrorIs(t, err, store.ErrNotFound)

	// Bob's share of his own chat never shows in Alice's list, and the reverse.
	bobTok, _, _, err := s.ShareSession(ctx, other.ID, "bob", 2)
	require.NoError(t, err)

	// The chat grew: a new link at the new watermark; the old one stays live and listed.
	clock.Advance(time.Minute)
	_, err = s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q2"})
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
	assert.ErrorIs(t, s.RevokeShareID(ctx, list[1].ID(), "bob"), store.ErrNotFound)
	require.NoError(t, s.RevokeShareID(ctx, list[1].ID(), "alice"))
	_, err = s.GetShare(ctx, tok1)
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.ErrorIs(t, s.RevokeShareID(ctx, list[1].ID(), "alice"), store.ErrNotFound)
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
	h.check(t, s)
}

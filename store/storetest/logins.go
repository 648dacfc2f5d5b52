package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testLoginCodeOneTime(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	alice, _, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)

	code, exp, err := s.CreateLoginCode(ctx, alice.ID, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, clock.Now().Add(store.MaxLoginCodeTTL), exp, "a longer ttl is capped at 15 minutes")
	assert.False(t, h.stored(t, s, "login_code", code), "the code itself is never stored")
	assert.True(t, h.stored(t, s, "login_code", hashToken(code)))

	u, sess, err := s.RedeemLoginCode(ctx, code, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, alice.ID, u.ID)
	got, err := s.UserBySession(ctx, sess)
	require.NoError(t, err)
	assert.Equal(t, alice.ID, got.ID)
	_, err = s.UserByToken(ctx, sess)
	assert.ErrorIs(t, err, store.ErrNotFound, "a web session is not an API token")

	_, _, err = s.RedeemLoginCode(ctx, code, time.Hour)
	assert.ErrorIs(t, err, store.ErrNotFound, "a code works once")
	_, _, err = s.RedeemLoginCode(ctx, "", time.Hour)
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.CreateLoginCode(ctx, "no-such-user", 0)
	assert.ErrorIs(t, err, store.ErrNotFound)
	h.check(t, s)
}

func testLoginCodeConcurrentRedeemOnce(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	alice, _, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)
	code, _, err := s.CreateLoginCode(ctx, alice.ID, 0)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := s.RedeemLoginCode(ctx, code, time.Hour); err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, wins, "exactly one of the racing requests logs in")
}

func testLoginCodeAndSessionExpiry(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	alice, _, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)

	code, _, err := s.CreateLoginCode(ctx, alice.ID, 10*time.Minute)
	require.NoError(t, err)
	clock.Advance(10*time.Minute - time.Second)
	fresh, _, err := s.CreateLoginCode(ctx, alice.ID, 0)
	require.NoError(t, err)
	clock.Advance(time.Second)
	_, _, err = s.RedeemLoginCode(ctx, code, time.Hour)
	assert.ErrorIs(t, err, store.ErrNotFound, "expired at exactly its expiry")
	assert.False(t, h.stored(t, s, "login_code", hashToken(code)), "an expired code tried is deleted")

	_, sess, err := s.RedeemLoginCode(ctx, fresh, time.Hour)
	require.NoError(t, err)
	clock.Advance(time.Hour - time.Nanosecond)
	_, err = s.UserBySession(ctx, sess)
	require.NoError(t, err)
	clock.Advance(time.Nanosecond)
	_, err = s.UserBySession(ctx, sess)
	assert.ErrorIs(t, err, store.ErrNotFound, "sessions expire")

	// Expired codes are pruned when the next one is made.
	old, _, err := s.CreateLoginCode(ctx, alice.ID, time.Minute)
	require.NoError(t, err)
	clock.Advance(2 * time.Minute)
	_, _, err = s.CreateLoginCode(ctx, alice.ID, time.Minute)
	require.NoError(t, err)
	assert.False(t, h.stored(t, s, "login_code", hashToken(old)))

	require.NoError(t, s.DeleteSession(ctx, sess))
	assert.False(t, h.stored(t, s, "web_session", hashToken(sess)), "logout drops the session (and expired ones)")
}

func testRotateRevokeAndList(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	alice, oldTok, err := s.CreateUser(ctx, "Alice")
	require.NoError(t, err)
	bob, bobTok, err := s.CreateUser(ctx, "bob")
	require.NoError(t, err)
	code, _, err := s.CreateLoginCode(ctx, alice.ID, 0)
	require.NoError(t, err)
	_, sess, err := s.RedeemLoginCode(ctx, code, time.Hour)
	require.NoError(t, err)
	pending, _, err := s.CreateLoginCode(ctx, alice.ID, 0)
	require.NoError(t, err)

	list, err := s.ListUsers(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, store.UserInfo{User: alice, Active: true, WebSessions: 1}, list[0])
	assert.Equal(t, store.UserInfo{User: bob, Active: true}, list[1])

	u, newTok, err := s.RotateToken(ctx, "  alice ")
	require.NoError(t, err, "names ignore case and space")
	assert.Equal(t, alice.ID, u.ID)
	assert.NotEqual(t, oldTok, newTok)
	_, err = s.UserByToken(ctx, oldTok)
	assert.ErrorIs(t, err, store.ErrNotFound, "the old token stops working")
	_, err = s.UserBySession(ctx, sess)
	assert.ErrorIs(t, err, store.ErrNotFound, "browser sessions end with the old token")
	_, _, err = s.RedeemLoginCode(ctx, pending, time.Hour)
	assert.ErrorIs(t, err, store.ErrNotFound, "pending login links die too")
	got, err := s.UserByToken(ctx, newTok)
	require.NoError(t, err)
	assert.Equal(t, alice.ID, got.ID)
	_, err = s.UserByToken(ctx, bobTok)
	require.NoError(t, err, "other users are untouched")

	_, err = s.RevokeUser(ctx, "alice")
	require.NoError(t, err)
	_, err = s.UserByToken(ctx, newTok)
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.CreateLoginCode(ctx, alice.ID, 0)
	assert.ErrorIs(t, err, store.ErrRevoked, "no login link for a revoked user")
	_, err = s.RevokeUser(ctx, "alice")
	require.NoError(t, err, "revoking twice is fine")
	list, err = s.ListUsers(ctx)
	require.NoError(t, err)
	assert.False(t, list[0].Active)
	assert.Zero(t, list[0].WebSessions)

	_, again, err := s.RotateToken(ctx, "alice")
	require.NoError(t, err, "a new token re-activates")
	_, err = s.UserByToken(ctx, again)
	require.NoError(t, err)

	_, _, err = s.RotateToken(ctx, "carol")
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.RevokeUser(ctx, "carol")
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.UserByName(ctx, "carol")
	assert.ErrorIs(t, err, store.ErrNotFound)
	h.check(t, s)
}

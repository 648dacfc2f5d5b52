package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoginCodeOneTime(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	alice, _, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)

	code, exp, err := s.CreateLoginCode(ctx, alice.ID, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, s.nowUTC().Add(MaxLoginCodeTTL), exp, "a longer ttl is capped at 15 minutes")
	assert.Empty(t, rawGet(t, s, bucketLoginCodes, []byte(code)), "the code itself is never stored")
	assert.NotEmpty(t, rawGet(t, s, bucketLoginCodes, []byte(hashToken(code))))

	u, sess, err := s.RedeemLoginCode(ctx, code, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, alice.ID, u.ID)
	got, err := s.UserBySession(ctx, sess)
	require.NoError(t, err)
	assert.Equal(t, alice.ID, got.ID)
	_, err = s.UserByToken(ctx, sess)
	assert.ErrorIs(t, err, ErrNotFound, "a web session is not an API token")

	_, _, err = s.RedeemLoginCode(ctx, code, time.Hour)
	assert.ErrorIs(t, err, ErrNotFound, "a code works once")
	_, _, err = s.RedeemLoginCode(ctx, "", time.Hour)
	assert.ErrorIs(t, err, ErrNotFound)
	_, _, err = s.CreateLoginCode(ctx, "no-such-user", 0)
	assert.ErrorIs(t, err, ErrNotFound)
	checkConsistency(t, s)
}

func TestLoginCodeConcurrentRedeemOnce(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
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

func TestLoginCodeAndSessionExpiry(t *testing.T) {
	ctx := context.Background()
	s, clock := openTest(t)
	alice, _, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)

	code, _, err := s.CreateLoginCode(ctx, alice.ID, 10*time.Minute)
	require.NoError(t, err)
	clock.Advance(10*time.Minute - time.Second)
	fresh, _, err := s.CreateLoginCode(ctx, alice.ID, 0)
	require.NoError(t, err)
	clock.Advance(time.Second)
	_, _, err = s.RedeemLoginCode(ctx, code, time.Hour)
	assert.ErrorIs(t, err, ErrNotFound, "expired at exactly its expiry")
	assert.Empty(t, rawGet(t, s, bucketLoginCodes, []byte(hashToken(code))), "an expired code tried is deleted")

	_, sess, err := s.RedeemLoginCode(ctx, fresh, time.Hour)
	require.NoError(t, err)
	clock.Advance(time.Hour - time.Nanosecond)
	_, err = s.UserBySession(ctx, sess)
	require.NoError(t, err)
	clock.Advance(time.Nanosecond)
	_, err = s.UserBySession(ctx, sess)
	assert.ErrorIs(t, err, ErrNotFound, "sessions expire")

	// Expired codes are pruned when the next one is made.
	old, _, err := s.CreateLoginCode(ctx, alice.ID, time.Minute)
	require.NoError(t, err)
	clock.Advance(2 * time.Minute)
	_, _, err = s.CreateLoginCode(ctx, alice.ID, time.Minute)
	require.NoError(t, err)
	assert.Empty(t, rawGet(t, s, bucketLoginCodes, []byte(hashToken(old))))

	require.NoError(t, s.DeleteSession(ctx, sess))
	assert.Empty(t, rawGet(t, s, bucketWebSessions, []byte(hashToken(sess))), "logout drops the session (and expired ones)")
}

func TestRotateRevokeAndList(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
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
	assert.Equal(t, UserInfo{User: alice, Active: true, WebSessions: 1}, list[0])
	assert.Equal(t, UserInfo{User: bob, Active: true}, list[1])

	u, newTok, err := s.RotateToken(ctx, "  alice ")
	require.NoError(t, err, "names ignore case and space")
	assert.Equal(t, alice.ID, u.ID)
	assert.NotEqual(t, oldTok, newTok)
	_, err = s.UserByToken(ctx, oldTok)
	assert.ErrorIs(t, err, ErrNotFound, "the old token stops working")
	_, err = s.UserBySession(ctx, sess)
	assert.ErrorIs(t, err, ErrNotFound, "browser sessions end with the old token")
	_, _, err = s.RedeemLoginCode(ctx, pending, time.Hour)
	assert.ErrorIs(t, err, ErrNotFound, "pending login links die too")
	got, err := s.UserByToken(ctx, newTok)
	require.NoError(t, err)
	assert.Equal(t, alice.ID, got.ID)
	_, err = s.UserByToken(ctx, bobTok)
	require.NoError(t, err, "other users are untouched")

	_, err = s.RevokeUser(ctx, "alice")
	require.NoError(t, err)
	_, err = s.UserByToken(ctx, newTok)
	assert.ErrorIs(t, err, ErrNotFound)
	_, _, err = s.CreateLoginCode(ctx, alice.ID, 0)
	assert.ErrorIs(t, err, ErrRevoked, "no login link for a revoked user")
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
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = s.RevokeUser(ctx, "carol")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = s.UserByName(ctx, "carol")
	assert.ErrorIs(t, err, ErrNotFound)
	checkConsistency(t, s)
}

// TestBackupWhileWriting copies the database while writers keep going, then opens the copy on its
// own: it must be a consistent bbolt file holding at least everything written before the backup.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for i := range 50 {
		_, _, err := s.CreateUser(ctx, fmt.Sprintf("before-%d", i))
		require.NoError(t, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := s.CreateUser(ctx, fmt.Sprintf("during-%d", i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	path := filepath.Join(t.TempDir(), "backup.db")
	n, err := s.BackupFile(ctx, path)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	assert.Positive(t, n)

	cp := openAt(t, path, nil)
	checkConsistency(t, cp)
	for i := range 50 {
		_, err := cp.UserByName(ctx, fmt.Sprintf("before-%d", i))
		require.NoError(t, err)
	}
}

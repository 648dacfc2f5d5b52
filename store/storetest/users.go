package storetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testCreateUserAndTokenLookup(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)

	n, err := s.CountUsers(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)

	alice, aliceToken, err := s.CreateUser(ctx, "  alice ")
	require.NoError(t, err)
	assert.Equal(t, "alice", alice.Name, "name is trimmed")
	assert.Equal(t, clock.Now(), alice.CreatedAt)
	raw, err := base64.RawURLEncoding.DecodeString(aliceToken)
	require.NoError(t, err, "token is base64url without padding")
	assert.Len(t, raw, 32)

	bob, bobToken, err := s.CreateUser(ctx, "bob")
	require.NoError(t, err)
	assert.NotEqual(t, alice.ID, bob.ID)
	assert.NotEqual(t, aliceToken, bobToken)

	for token, want := range map[string]store.User{aliceToken: alice, bobToken: bob} {
		got, err := s.UserByToken(ctx, token)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	got, err := s.GetUser(ctx, bob.ID)
	require.NoError(t, err)
	assert.Equal(t, bob, got)
	n, err = s.CountUsers(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	for _, bad := range []string{"", "x", aliceToken + "x", aliceToken[:len(aliceToken)-1], strings.ToUpper(aliceToken)} {
		_, err := s.UserByToken(ctx, bad)
		assert.ErrorIs(t, err, store.ErrNotFound, "token %q", bad)
		if bad != "" {
			assert.NotContains(t, err.Error(), bad, "errors never echo a token")
		}
	}
	_, err = s.GetUser(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)

	// Only the hash is stored: the raw bucket holds sha256 keys, and no token appears anywhere in
	// the file.
	for _, tok := range []string{aliceToken, bobToken} {
		assert.True(t, h.stored(t, s, "user_token", hashToken(tok)))
		assert.False(t, h.stored(t, s, "user_token", tok))
	}
	file := h.dump(t, s)
	for _, tok := range []string{aliceToken, bobToken} {
		assert.False(t, bytes.Contains(file, []byte(tok)), "token stored in clear")
		assert.True(t, bytes.Contains(file, []byte(hashToken(tok))), "hash stored")
	}
}

func testCreateUserNameRules(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	_, _, err := s.CreateUser(ctx, "Alice")
	require.NoError(t, err)

	tests := []struct {
		name    string
		in      string
		wantErr error
		msg     string
	}{
		{"empty", "", store.ErrInvalid, "empty"},
		{"blank", " \t ", store.ErrInvalid, "empty"},
		{"65 characters", strings.Repeat("a", 65), store.ErrInvalid, "at most 64"},
		{"64 characters", strings.Repeat("a", 64), nil, ""},
		{"64 multibyte characters", strings.Repeat("名", 64), nil, ""},
		{"65 multibyte characters", strings.Repeat("名", 65), store.ErrInvalid, "at most 64"},
		{"control character", "a\nb", store.ErrInvalid, "control"},
		{"invalid UTF-8", "a\xffb", store.ErrInvalid, "UTF-8"},
		{"taken", "Alice", store.ErrConflict, "already taken"},
		{"taken ignoring case", "alice", store.ErrConflict, "already taken"},
		{"taken after trim", " ALICE ", store.ErrConflict, "already taken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := s.CountUsers(ctx)
			require.NoError(t, err)
			u, token, err := s.CreateUser(ctx, tt.in)
			after, cerr := s.CountUsers(ctx)
			require.NoError(t, cerr)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), tt.msg)
				assert.Empty(t, token)
				assert.Equal(t, before, after)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.in, u.Name)
			assert.Equal(t, before+1, after)
		})
	}
}

func testUsersSurviveReopen(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	s := h.openAt(t, path, newClock())
	u, token, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s, err = path(store.Options{Timeout: 100 * time.Millisecond, Logger: quietLogger()})
	require.NoError(t, err)
	defer s.Close()
	got, err := s.UserByToken(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, u, got)
	_, _, err = s.CreateUser(ctx, "ALICE")
	assert.ErrorIs(t, err, store.ErrConflict)
}

package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testUserLanguage checks the per-user interface language: every way of reading a user carries it,
// bad values and unknown users change nothing, and the choice survives a restart.
func testUserLanguage(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.NewDB(t)
	s := h.openAt(t, db, newClock())

	alice, aliceTok, err := s.CreateUserRole(ctx, "alice", true, cli)
	require.NoError(t, err)
	assert.Empty(t, alice.Language, "a new user follows the browser")
	bob, _, err := s.CreateUser(ctx, "bob")
	require.NoError(t, err)

	u, err := s.SetLanguage(ctx, alice.ID, store.LangEN)
	require.NoError(t, err)
	assert.Equal(t, store.LangEN, u.Language)
	assert.True(t, u.Operator, "the other fields are kept")
	assert.Equal(t, alice.Name, u.Name)
	assert.Equal(t, alice.CreatedAt, u.CreatedAt)

	sessTok, err := s.CreateWebSession(ctx, alice.ID, time.Hour)
	require.NoError(t, err)
	readers := map[string]func() (store.User, error){
		"GetUser":       func() (store.User, error) { return s.GetUser(ctx, alice.ID) },
		"UserByToken":   func() (store.User, error) { return s.UserByToken(ctx, aliceTok) },
		"UserByName":    func() (store.User, error) { return s.UserByName(ctx, "ALICE") },
		"UserBySession": func() (store.User, error) { return s.UserBySession(ctx, sessTok) },
	}
	expectAll := func(want string) {
		t.Helper()
		for name, read := range readers {
			got, err := read()
			require.NoError(t, err, name)
			assert.Equal(t, want, got.Language, name)
			assert.True(t, got.Operator, name)
		}
		users, err := s.ListUsers(ctx)
		require.NoError(t, err)
		for _, ui := range users {
			if ui.ID == alice.ID {
				assert.Equal(t, want, ui.Language, "ListUsers")
			} else {
				assert.Empty(t, ui.Language, "another user's choice is untouched")
			}
		}
	}
	expectAll(store.LangEN)

	// The owner a share listing carries is the same user record.
	sess, err := s.CreateSession(ctx, store.Session{UserID: alice.ID, Channel: "desktop", Title: "t"})
	require.NoError(t, err)
	_, _, err = s.CreateShare(ctx, sess.ID, alice.ID, 0)
	require.NoError(t, err)
	all, err := s.ListAllShares(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, store.LangEN, all[0].Owner.Language)

	for _, bad := range []string{"EN", "fr", "en-US", " en", "zh-CN", "english"} {
		_, err := s.SetLanguage(ctx, alice.ID, bad)
		assert.ErrorIs(t, err, store.ErrInvalid, "%q", bad)
		assert.ErrorIs(t, store.CheckLanguage(bad), store.ErrInvalid, "%q", bad)
	}
	expectAll(store.LangEN)
	_, err = s.SetLanguage(ctx, "no-such-user", store.LangZH)
	assert.ErrorIs(t, err, store.ErrNotFound)

	u, err = s.SetLanguage(ctx, alice.ID, store.LangZH)
	require.NoError(t, err)
	assert.Equal(t, store.LangZH, u.Language)
	u, err = s.SetLanguage(ctx, alice.ID, store.LangZH)
	require.NoError(t, err, "setting the language the user has is no error")
	assert.Equal(t, store.LangZH, u.Language)
	expectAll(store.LangZH)

	_, err = s.SetLanguage(ctx, bob.ID, store.LangEN)
	require.NoError(t, err)
	got, err := s.GetUser(ctx, alice.ID)
	require.NoError(t, err)
	assert.Equal(t, store.LangZH, got.Language, "bob's choice is his own")

	u, err = s.SetLanguage(ctx, alice.ID, "")
	require.NoError(t, err)
	assert.Empty(t, u.Language, "the empty language clears the choice")
	_, err = s.SetLanguage(ctx, alice.ID, store.LangEN)
	require.NoError(t, err)

	h.check(t, s)
	require.NoError(t, s.Close())
	s = h.openAt(t, db, newClock())
	got, err = s.UserByToken(ctx, aliceTok)
	require.NoError(t, err)
	assert.Equal(t, store.LangEN, got.Language, "the choice survives a restart")
	got, err = s.GetUser(ctx, bob.ID)
	require.NoError(t, err)
	assert.Equal(t, store.LangEN, got.Language)
}

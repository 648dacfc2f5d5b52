package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testCreateSession(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)

	a, err := s.CreateSession(ctx, store.Session{UserID: "u1", Channel: "desktop", Title: "first"})
	require.NoError(t, err)
	assert.Len(t, a.ID, 22, "16 random bytes, base64url")
	assert.NotContains(t, a.ID, "=")
	assert.Equal(t, clock.Now(), a.CreatedAt)
	assert.Equal(t, clock.Now(), a.UpdatedAt)
	got, err := s.GetSession(ctx, a.ID)
	require.NoError(t, err)
	assert.Equal(t, a, got)

	b, err := s.CreateSession(ctx, store.Session{UserID: "u1"})
	require.NoError(t, err)
	assert.NotEqual(t, a.ID, b.ID)

	tests := []struct {
		name    string
		in      store.Session
		wantErr error
	}{
		{"caller id", store.Session{ID: "feishu-oc_1", UserID: "u2", Channel: "feishu"}, nil},
		{"duplicate id", store.Session{ID: "feishu-oc_1"}, store.ErrConflict},
		{"NUL in id", store.Session{ID: "a\x00b"}, store.ErrInvalid},
		{"id too long", store.Session{ID: strings.Repeat("x", 256+1)}, store.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.CreateSession(ctx, tt.in)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.in.ID, got.ID)
		})
	}
	orig, err := s.GetSession(ctx, "feishu-oc_1")
	require.NoError(t, err)
	assert.Equal(t, "u2", orig.UserID, "a conflicting create changed nothing")

	_, err = s.GetSession(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)
	assert.ErrorIs(t, s.SetSessionTitle(ctx, "nope", "t"), store.ErrNotFound)
}

func testListSessionsNewestActivityFirst(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)

	var ids []string
	for range 3 {
		clock.Advance(time.Minute)
		ids = append(ids, newSession(t, s, "alice").ID)
	}
	newSession(t, s, "bob")
	newSession(t, s, "") // a channel session without a user must not leak into anyone's list
	// Activity in the oldest session moves it to the top; a rename does not.
	clock.Advance(time.Minute)
	_, err := s.AppendMessage(ctx, store.Message{SessionID: ids[0], Role: store.RoleUser, Content: "hi"})
	require.NoError(t, err)
	clock.Advance(time.Minute)
	require.NoError(t, s.SetSessionTitle(ctx, ids[1], "renamed"))

	list, err := s.ListSessions(ctx, "alice")
	require.NoError(t, err)
	var got []string
	for _, se := range list {
		assert.Equal(t, "alice", se.UserID)
		got = append(got, se.ID)
	}
	assert.Equal(t, []string{ids[0], ids[2], ids[1]}, got)
	assert.Equal(t, "renamed", list[2].Title)

	none, err := s.ListSessions(ctx, "carol")
	require.NoError(t, err)
	assert.NotNil(t, none)
	assert.Empty(t, none)

	anon, err := s.ListSessions(ctx, "")
	require.NoError(t, err)
	assert.Len(t, anon, 1)
}

func testConversationBinding(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	first := newSession(t, s, "")
	second := newSession(t, s, "")

	_, err := s.ConversationSession(ctx, "feishu:oc_1")
	assert.ErrorIs(t, err, store.ErrNotFound)

	require.NoError(t, s.BindConversation(ctx, "feishu:oc_1", first.ID))
	got, err := s.ConversationSession(ctx, "feishu:oc_1")
	require.NoError(t, err)
	assert.Equal(t, first.ID, got)

	// /new rebinds the conversation to a fresh session.
	require.NoError(t, s.BindConversation(ctx, "feishu:oc_1", second.ID))
	got, err = s.ConversationSession(ctx, "feishu:oc_1")
	require.NoError(t, err)
	assert.Equal(t, second.ID, got)

	assert.ErrorIs(t, s.BindConversation(ctx, "feishu:oc_2", "nope"), store.ErrNotFound)
	_, err = s.ConversationSession(ctx, "feishu:oc_2")
	assert.ErrorIs(t, err, store.ErrNotFound, "a failed bind binds nothing")
	assert.ErrorIs(t, s.BindConversation(ctx, "", first.ID), store.ErrInvalid)
}

package storetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// testListMessagesAfterPages: walking a session forward page by page (what an export does) yields
// every message once, in order, never one of a neighbouring session.
func testListMessagesAfterPages(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	a := newSession(t, s, "u1")
	b := newSession(t, s, "u1")
	all := fillSession(t, s, a, 3)
	fillSession(t, s, b, 2)
	all = append(all, fillSession(t, s, a, 2)...)

	page, err := s.ListMessagesAfter(ctx, a.ID, 0, 5)
	require.NoError(t, err)
	assert.Equal(t, ids(all[:5]), ids(page), "the oldest page, ascending")
	var got []store.Message
	cursor := uint64(0)
	for {
		page, err := s.ListMessagesAfter(ctx, a.ID, cursor, 3)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		cursor = page[len(page)-1].ID
	}
	assert.Equal(t, ids(all), ids(got), "walking forward page by page yields the whole session once")

	page, err = s.ListMessagesAfter(ctx, a.ID, all[len(all)-1].ID, 5)
	require.NoError(t, err)
	assert.Empty(t, page, "nothing after the newest message, not even the next session's")
	page, err = s.ListMessagesAfter(ctx, a.ID, ^uint64(0), 5)
	require.NoError(t, err)
	assert.Empty(t, page)
	_, err = s.ListMessagesAfter(ctx, "missing", 0, 5)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ListMessagesAfter(ctx, a.ID, 0, 0)
	require.ErrorIs(t, err, store.ErrInvalid)
	empty := newSession(t, s, "u1")
	page, err = s.ListMessagesAfter(ctx, empty.ID, 0, 5)
	require.NoError(t, err)
	assert.Empty(t, page)
}

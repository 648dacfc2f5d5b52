package store

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A dedup record whose bytes are not an expiry counts as expired: PruneSeen removes it and
// MarkSeen takes the key over, so a corrupt record never blocks a message forever.
func TestPruneSeenDropsCorruptEntry(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	fresh, err := s.MarkSeen(ctx, "live", time.Hour)
	require.NoError(t, err)
	require.True(t, fresh)
	rawPut(t, s, bucketSeen, []byte("corrupt"), []byte("xx"))
	rawPut(t, s, bucketSeen, []byte("corrupt2"), []byte("yy"))

	fresh, err = s.MarkSeen(ctx, "corrupt2", time.Hour)
	require.NoError(t, err)
	assert.True(t, fresh, "a corrupt record is overwritten")
	n, err := s.PruneSeen(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only the corrupt entry counts as expired now")
	fresh, err = s.MarkSeen(ctx, "live", time.Hour)
	require.NoError(t, err)
	assert.False(t, fresh)
	checkConsistency(t, s)
}

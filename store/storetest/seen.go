package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testMarkSeen(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	const ttl = 24 * time.Hour

	steps := []struct {
		name    string
		advance time.Duration
		key     string
		want    bool
	}{
		{"first delivery", 0, "feishu:om_1", true},
		{"redelivery at 15s", 15 * time.Second, "feishu:om_1", false},
		{"other key", 0, "feishu:om_2", true},
		{"redelivery at 6h", 6 * time.Hour, "feishu:om_1", false},
		{"just before expiry", ttl - 6*time.Hour - 15*time.Second - time.Nanosecond, "feishu:om_1", false},
		{"at expiry", time.Nanosecond, "feishu:om_1", true},
		{"recorded again", time.Minute, "feishu:om_1", false},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		got, err := s.MarkSeen(ctx, st.key, ttl)
		require.NoError(t, err, st.name)
		assert.Equal(t, st.want, got, st.name)
	}

	_, err := s.MarkSeen(ctx, "", ttl)
	assert.ErrorIs(t, err, store.ErrInvalid)
	_, err = s.MarkSeen(ctx, "k", 0)
	assert.ErrorIs(t, err, store.ErrInvalid)
	_, err = s.MarkSeen(ctx, "k", -time.Second)
	assert.ErrorIs(t, err, store.ErrInvalid)
}

func testPruneSeen(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	clock := newClock()
	s := h.openAt(t, path, clock)

	for i := range 10 {
		ttl := time.Hour
		if i%2 == 1 {
			ttl = 48 * time.Hour
		}
		fresh, err := s.MarkSeen(ctx, fmt.Sprintf("k%d", i), ttl)
		require.NoError(t, err)
		require.True(t, fresh)
	}
	n, err := s.PruneSeen(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing has expired yet")

	clock.Advance(2 * time.Hour)
	n, err = s.PruneSeen(ctx)
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	n, err = s.PruneSeen(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing left to prune")

	require.NoError(t, s.Close())
	s = h.openAt(t, path, clock)
	for i := range 10 {
		fresh, err := s.MarkSeen(ctx, fmt.Sprintf("k%d", i), time.Hour)
		require.NoError(t, err)
		assert.Equal(t, i%2 == 0, fresh, "k%d: pruned keys are new, live ones still duplicates", i)
	}
	h.check(t, s)
}

// Many goroutines racing on the same platform message id: exactly one wins.
func testMarkSeenConcurrentExactlyOnce(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	const keys, racers = 20, 8
	var wins [keys]atomic.Int32
	var wg sync.WaitGroup
	for range racers {
		wg.Go(func() {
			for k := range keys {
				fresh, err := s.MarkSeen(ctx, fmt.Sprintf("dingtalk:msg%d", k), time.Hour)
				if assert.NoError(t, err) && fresh {
					wins[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		assert.Equal(t, int32(1), wins[k].Load(), "key %d", k)
	}
	h.check(t, s)
}

// TestUnmarkSeen: a forgotten key is new again (a redelivery is processed); forgetting a key that
// is not there is fine; an empty key is refused.
func testUnmarkSeen(t *testing.T, h Harness) {
	s, _ := h.openTest(t)
	ctx := context.Background()
	first, err := s.MarkSeen(ctx, "msg:rec:1", time.Hour)
	require.NoError(t, err)
	require.True(t, first)
	require.NoError(t, s.UnmarkSeen(ctx, "msg:rec:1"))
	again, err := s.MarkSeen(ctx, "msg:rec:1", time.Hour)
	require.NoError(t, err)
	assert.True(t, again, "after UnmarkSeen the key is new")
	dup, err := s.MarkSeen(ctx, "msg:rec:1", time.Hour)
	require.NoError(t, err)
	assert.False(t, dup)
	require.NoError(t, s.UnmarkSeen(ctx, "msg:rec:never"))
	assert.ErrorIs(t, s.UnmarkSeen(ctx, ""), store.ErrInvalid)
}

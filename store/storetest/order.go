package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RunAhead names the oldest earlier RUNNING run of the session owned by another replica, in the
// order the runs were stored (not by their clocks); finished runs, later runs, the asking owner's
// own runs and other sessions' runs do not count.
func testRunAheadInStoreOrder(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess, other := newSession(t, s, "u1"), newSession(t, s, "u2")
	lease := clock.Now().Add(time.Minute)
	create := func(sid, owner string, started time.Time) store.Run {
		t.Helper()
		r, err := s.CreateRun(ctx, store.Run{SessionID: sid, Channel: "feishu", LeaseOwner: owner, LeaseUntil: lease, StartedAt: started})
		require.NoError(t, err)
		return r
	}
	ahead := func(runID, owner string) string {
		t.Helper()
		r, err := s.RunAhead(ctx, runID, owner)
		if err != nil {
			require.ErrorIs(t, err, store.ErrNotFound)
			return ""
		}
		assert.Equal(t, store.PhaseRunning, r.Phase)
		return r.ID
	}
	done := create(sess.ID, "a", time.Time{})
	_, err := s.FinishRun(ctx, done.ID, store.PhaseCompleted, "", 0)
	require.NoError(t, err)
	create(other.ID, "a", time.Time{})
	first := create(sess.ID, "a", time.Time{})
	// Stored second with a clock that reads earlier than the first run's: store order decides.
	second := create(sess.ID, "b", clock.Now().Add(-time.Hour))
	clock.Advance(time.Second)
	third := create(sess.ID, "b", time.Time{})

	assert.Empty(t, ahead(first.ID, ""), "nothing earlier is running: a finished run and another session's do not count")
	assert.Equal(t, first.ID, ahead(second.ID, "b"))
	assert.Equal(t, first.ID, ahead(third.ID, "b"), "the oldest earlier run")
	assert.Equal(t, first.ID, ahead(third.ID, ""))
	assert.Equal(t, second.ID, ahead(third.ID, "a"), "the asking owner's own runs are ordered by its queue")
	assert.Empty(t, ahead(second.ID, "a"))
	assert.Empty(t, ahead("no-such-run", ""), "an unknown run has nothing to wait for")

	_, err = s.FinishRun(ctx, first.ID, store.PhaseCancelled, "", 0)
	require.NoError(t, err)
	assert.Empty(t, ahead(second.ID, ""), "the earlier run ended")
	assert.Equal(t, second.ID, ahead(third.ID, "a"))
	assert.Empty(t, ahead(third.ID, "b"))

	// A run reaped as interrupted no longer holds anyone back.
	reaped, err := s.ReapExpiredRuns(ctx, lease.Add(time.Second))
	require.NoError(t, err)
	assert.Len(t, reaped, 3, "second, third and the other session's run")
	assert.Empty(t, ahead(third.ID, ""))
}

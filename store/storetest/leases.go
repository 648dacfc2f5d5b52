package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run keeps the lease and origin it was created with; an origin must be JSON.
func testCreateRunKeepsLeaseAndOrigin(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess := newSession(t, s, "u1")
	r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, LeaseOwner: "replica-a", LeaseUntil: clock.Now().Add(time.Minute),
		Origin: json.RawMessage(`{ "channel": "wechat", "conversationId": "o1" }`)})
	require.NoError(t, err)
	got, err := s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, r, got, "what CreateRun returns is what is stored")
	assert.Equal(t, "replica-a", got.LeaseOwner)
	assert.Equal(t, clock.Now().Add(time.Minute), got.LeaseUntil)
	assert.JSONEq(t, `{"channel":"wechat","conversationId":"o1"}`, string(got.Origin))

	fin, err := s.FinishRun(ctx, r.ID, store.PhaseCompleted, "", 0)
	require.NoError(t, err)
	assert.True(t, fin.LeaseUntil.IsZero(), "a finished run holds no lease")
	got, err = s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, fin, got)

	_, err = s.CreateRun(ctx, store.Run{SessionID: sess.ID, Origin: json.RawMessage(`{not json`)})
	assert.ErrorIs(t, err, store.ErrInvalid)
}

// ActiveRun finds the session's newest RUNNING run, whoever runs it.
func testActiveRun(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess, other := newSession(t, s, "u1"), newSession(t, s, "u2")

	_, err := s.ActiveRun(ctx, sess.ID)
	assert.ErrorIs(t, err, store.ErrNotFound, "no run at all")

	done, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID})
	require.NoError(t, err)
	_, err = s.FinishRun(ctx, done.ID, store.PhaseCompleted, "", 0)
	require.NoError(t, err)
	_, err = s.CreateRun(ctx, store.Run{SessionID: other.ID})
	require.NoError(t, err)
	_, err = s.ActiveRun(ctx, sess.ID)
	assert.ErrorIs(t, err, store.ErrNotFound, "a finished run and another session's run do not count")

	older, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, LeaseOwner: "a"})
	require.NoError(t, err)
	clock.Advance(time.Second)
	newer, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, LeaseOwner: "b"})
	require.NoError(t, err)
	got, err := s.ActiveRun(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, newer, got, "the newest running run, as stored")
	_, err = s.FinishRun(ctx, newer.ID, store.PhaseCancelled, "", 0)
	require.NoError(t, err)
	got, err = s.ActiveRun(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, older.ID, got.ID)
}

// A replica renews all its running runs in one call; a run whose lease passed is failed
// "interrupted" exactly once and cannot be concluded or renewed afterwards.
func testRenewAndReapRunLeases(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess := newSession(t, s, "u1")
	t0 := clock.Now()
	lease := 10 * time.Second
	create := func(owner string) store.Run {
		r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, LeaseOwner: owner, LeaseUntil: t0.Add(lease)})
		require.NoError(t, err)
		return r
	}
	mine, queued, theirs, finished := create("a"), create("a"), create("b"), create("a")
	_, err := s.FinishRun(ctx, finished.ID, store.PhaseCompleted, "", 0)
	require.NoError(t, err)

	n, err := s.RenewRunLeases(ctx, "a", t0.Add(2*lease))
	require.NoError(t, err)
	assert.Equal(t, 2, n, "both running runs of a, queued or not; not its finished one")
	_, err = s.RenewRunLeases(ctx, "", t0)
	assert.ErrorIs(t, err, store.ErrInvalid)
	got, err := s.GetRun(ctx, queued.ID)
	require.NoError(t, err)
	assert.Equal(t, t0.Add(2*lease), got.LeaseUntil)

	reaped, err := s.ReapExpiredRuns(ctx, t0.Add(lease-time.Second))
	require.NoError(t, err)
	assert.Empty(t, reaped, "no lease has passed yet")

	clock.Advance(lease + time.Second)
	reaped, err = s.ReapExpiredRuns(ctx, clock.Now())
	require.NoError(t, err)
	require.Len(t, reaped, 1, "b's lease passed; a renewed")
	assert.Equal(t, theirs.ID, reaped[0].ID)
	assert.Equal(t, store.PhaseFailed, reaped[0].Phase)
	assert.Equal(t, store.ErrorInterrupted, reaped[0].Error)
	assert.Equal(t, clock.Now(), reaped[0].EndedAt)
	assert.Equal(t, "b", reaped[0].LeaseOwner)
	got, err = s.GetRun(ctx, theirs.ID)
	require.NoError(t, err)
	assert.Equal(t, reaped[0], got)
	got, err = s.GetRun(ctx, finished.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseCompleted, got.Phase)

	reaped, err = s.ReapExpiredRuns(ctx, clock.Now())
	require.NoError(t, err)
	assert.Empty(t, reaped, "a run is reaped once")
	n, err = s.RenewRunLeases(ctx, "b", clock.Now().Add(lease))
	require.NoError(t, err)
	assert.Zero(t, n, "a reaped run is not renewed")
	_, _, err = s.ConcludeRun(ctx, store.Conclusion{RunID: theirs.ID, Phase: store.PhaseCompleted})
	assert.ErrorIs(t, err, store.ErrConflict, "its late owner cannot conclude it")

	reaped, err = s.ReapExpiredRuns(ctx, clock.Now().Add(time.Hour))
	require.NoError(t, err)
	ids := []string{}
	for _, r := range reaped {
		ids = append(ids, r.ID)
	}
	assert.ElementsMatch(t, []string{mine.ID, queued.ID}, ids)
	_, err = s.ActiveRun(ctx, sess.ID)
	assert.ErrorIs(t, err, store.ErrNotFound)
}

package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testCreateRun(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess := newSession(t, s, "u1")

	r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: 7,
		Phase: store.PhaseCompleted, Error: "ignored", EndedAt: clock.Now(), FinalMessageID: 9})
	require.NoError(t, err)
	assert.NotEmpty(t, r.ID)
	assert.Equal(t, store.PhaseRunning, r.Phase, "a new run is always RUNNING")
	assert.Equal(t, clock.Now(), r.StartedAt)
	assert.True(t, r.EndedAt.IsZero())
	assert.Empty(t, r.Error)
	assert.Zero(t, r.FinalMessageID)
	assert.Equal(t, uint64(7), r.UserMessageID)
	got, err := s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, r, got)

	_, err = s.CreateRun(ctx, store.Run{SessionID: "nope"})
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.CreateRun(ctx, store.Run{ID: r.ID, SessionID: sess.ID})
	assert.ErrorIs(t, err, store.ErrConflict)
	_, err = s.GetRun(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func testFinishRunRules(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess := newSession(t, s, "u1")

	tests := []struct {
		name    string
		phase   store.Phase
		errMsg  string
		final   uint64
		wantErr error
	}{
		{name: "completed", phase: store.PhaseCompleted, final: 42},
		{name: "failed", phase: store.PhaseFailed, errMsg: "model timed out"},
		{name: "cancelled", phase: store.PhaseCancelled, errMsg: "cancelled"},
		{name: "running is not terminal", phase: store.PhaseRunning, wantErr: store.ErrInvalid},
		{name: "made-up phase", phase: "DONE", wantErr: store.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID})
			require.NoError(t, err)
			clock.Advance(time.Second)
			got, err := s.FinishRun(ctx, r.ID, tt.phase, tt.errMsg, tt.final)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				stored, err := s.GetRun(ctx, r.ID)
				require.NoError(t, err)
				assert.Equal(t, r, stored, "unchanged")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.phase, got.Phase)
			assert.Equal(t, tt.errMsg, got.Error)
			assert.Equal(t, tt.final, got.FinalMessageID)
			assert.Equal(t, clock.Now(), got.EndedAt)
			stored, err := s.GetRun(ctx, r.ID)
			require.NoError(t, err)
			assert.Equal(t, got, stored)

			// A terminal run cannot be finished again, whatever the phase.
			clock.Advance(time.Second)
			for _, p := range []store.Phase{store.PhaseCompleted, store.PhaseFailed, store.PhaseCancelled} {
				_, err := s.FinishRun(ctx, r.ID, p, "again", 1)
				assert.ErrorIs(t, err, store.ErrConflict)
			}
			stored, err = s.GetRun(ctx, r.ID)
			require.NoError(t, err)
			assert.Equal(t, got, stored, "a refused finish changed nothing")
		})
	}

	_, err := s.FinishRun(ctx, "nope", store.PhaseCompleted, "", 0)
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func testSetRunMarkers(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")
	r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID})
	require.NoError(t, err)
	r, err = s.FinishRun(ctx, r.ID, store.PhaseCompleted, "", 3)
	require.NoError(t, err)

	require.NoError(t, s.SetRunMarkers(ctx, r.ID, 5, 3, 2))
	got, err := s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	want := r
	want.MarkersSeen, want.MarkersKept, want.MarkersDropped = 5, 3, 2
	assert.Equal(t, want, got)

	assert.ErrorIs(t, s.SetRunMarkers(ctx, "nope", 1, 1, 0), store.ErrNotFound)
	assert.ErrorIs(t, s.SetRunMarkers(ctx, r.ID, -1, 0, 0), store.ErrInvalid)
}

func testListRunsOldestFirst(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess := newSession(t, s, "u1")
	other := newSession(t, s, "u1")

	var want []string
	for i := range 4 {
		clock.Advance(time.Second)
		r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID})
		require.NoError(t, err)
		want = append(want, r.ID)
		if i%2 == 0 {
			_, err := s.CreateRun(ctx, store.Run{SessionID: other.ID})
			require.NoError(t, err)
		}
	}
	// A run recorded with an earlier explicit start sorts first.
	early, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, StartedAt: newClock().Now().Add(-time.Hour)})
	require.NoError(t, err)
	want = append([]string{early.ID}, want...)

	runs, err := s.ListRuns(ctx, sess.ID)
	require.NoError(t, err)
	var got []string
	for _, r := range runs {
		assert.Equal(t, sess.ID, r.SessionID)
		got = append(got, r.ID)
	}
	assert.Equal(t, want, got)

	otherRuns, err := s.ListRuns(ctx, other.ID)
	require.NoError(t, err)
	assert.Len(t, otherRuns, 2)

	empty := newSession(t, s, "u1")
	none, err := s.ListRuns(ctx, empty.ID)
	require.NoError(t, err)
	assert.NotNil(t, none)
	assert.Empty(t, none)
	_, err = s.ListRuns(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)
}

package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateRun(t *testing.T) {
	ctx := context.Background()
	s, clock := openTest(t)
	sess := newSession(t, s, "u1")

	r, err := s.CreateRun(ctx, Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: 7,
		Phase: PhaseCompleted, Error: "ignored", EndedAt: clock.Now(), FinalMessageID: 9})
	require.NoError(t, err)
	assert.NotEmpty(t, r.ID)
	assert.Equal(t, PhaseRunning, r.Phase, "a new run is always RUNNING")
	assert.Equal(t, clock.Now(), r.StartedAt)
	assert.True(t, r.EndedAt.IsZero())
	assert.Empty(t, r.Error)
	assert.Zero(t, r.FinalMessageID)
	assert.Equal(t, uint64(7), r.UserMessageID)
	got, err := s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, r, got)

	_, err = s.CreateRun(ctx, Run{SessionID: "nope"})
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = s.CreateRun(ctx, Run{ID: r.ID, SessionID: sess.ID})
	assert.ErrorIs(t, err, ErrConflict)
	_, err = s.GetRun(ctx, "nope")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestFinishRunRules(t *testing.T) {
	ctx := context.Background()
	s, clock := openTest(t)
	sess := newSession(t, s, "u1")

	tests := []struct {
		name    string
		phase   Phase
		errMsg  string
		final   uint64
		wantErr error
	}{
		{name: "completed", phase: PhaseCompleted, final: 42},
		{name: "failed", phase: PhaseFailed, errMsg: "model timed out"},
		{name: "cancelled", phase: PhaseCancelled, errMsg: "cancelled"},
		{name: "running is not terminal", phase: PhaseRunning, wantErr: ErrInvalid},
		{name: "made-up phase", phase: "DONE", wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := s.CreateRun(ctx, Run{SessionID: sess.ID})
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
			for _, p := range []Phase{PhaseCompleted, PhaseFailed, PhaseCancelled} {
				_, err := s.FinishRun(ctx, r.ID, p, "again", 1)
				assert.ErrorIs(t, err, ErrConflict)
			}
			stored, err = s.GetRun(ctx, r.ID)
			require.NoError(t, err)
			assert.Equal(t, got, stored, "a refused finish changed nothing")
		})
	}

	_, err := s.FinishRun(ctx, "nope", PhaseCompleted, "", 0)
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestSetRunMarkers(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	sess := newSession(t, s, "u1")
	r, err := s.CreateRun(ctx, Run{SessionID: sess.ID})
	require.NoError(t, err)
	r, err = s.FinishRun(ctx, r.ID, PhaseCompleted, "", 3)
	require.NoError(t, err)

	require.NoError(t, s.SetRunMarkers(ctx, r.ID, 5, 3, 2))
	got, err := s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	want := r
	want.MarkersSeen, want.MarkersKept, want.MarkersDropped = 5, 3, 2
	assert.Equal(t, want, got)

	assert.ErrorIs(t, s.SetRunMarkers(ctx, "nope", 1, 1, 0), ErrNotFound)
	assert.ErrorIs(t, s.SetRunMarkers(ctx, r.ID, -1, 0, 0), ErrInvalid)
}

func TestListRunsOldestFirst(t *testing.T) {
	ctx := context.Background()
	s, clock := openTest(t)
	sess := newSession(t, s, "u1")
	other := newSession(t, s, "u1")

	var want []string
	for i := range 4 {
		clock.Advance(time.Second)
		r, err := s.CreateRun(ctx, Run{SessionID: sess.ID})
		require.NoError(t, err)
		want = append(want, r.ID)
		if i%2 == 0 {
			_, err := s.CreateRun(ctx, Run{SessionID: other.ID})
			require.NoError(t, err)
		}
	}
	// A run recorded with an earlier explicit start sorts first.
	early, err := s.CreateRun(ctx, Run{SessionID: sess.ID, StartedAt: newClock().Now().Add(-time.Hour)})
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
	assert.ErrorIs(t, err, ErrNotFound)
}

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

func testReopenKeepsEverything(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	clock := newClock()
	s := h.openAt(t, path, clock)

	user, token, err := s.CreateUser(ctx, "alice")
	require.NoError(t, err)
	sess, err := s.CreateSession(ctx, store.Session{UserID: user.ID, Channel: "desktop", Title: "hello"})
	require.NoError(t, err)
	require.NoError(t, s.BindConversation(ctx, "feishu:oc_1", sess.ID))
	m1, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "question"})
	require.NoError(t, err)
	m2, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: "answer [^1^]",
		Metadata: json.RawMessage(`{"model":"x"}`)})
	require.NoError(t, err)
	require.NoError(t, s.MergeMetadata(ctx, m2.ID, map[string]json.RawMessage{
		"citations": json.RawMessage(`[{"n":1,"url":"https://example.com/a","title":"A"}]`),
	}))
	run, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: m1.ID})
	require.NoError(t, err)
	run, err = s.FinishRun(ctx, run.ID, store.PhaseCompleted, "", m2.ID)
	require.NoError(t, err)
	require.NoError(t, s.SetRunMarkers(ctx, run.ID, 2, 1, 1))
	run.MarkersSeen, run.MarkersKept, run.MarkersDropped = 2, 1, 1
	shareToken, share, err := s.CreateShare(ctx, sess.ID, user.ID, m2.ID)
	require.NoError(t, err)
	fresh, err := s.MarkSeen(ctx, "feishu:om_1", 24*time.Hour)
	require.NoError(t, err)
	require.True(t, fresh)
	wantMsgs, err := s.ListMessages(ctx, sess.ID)
	require.NoError(t, err)
	wantSess, err := s.GetSession(ctx, sess.ID)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = h.openAt(t, path, clock)
	assert.Equal(t, 0, s.RecoveredRuns())
	gotUser, err := s.UserByToken(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, user, gotUser)
	gotSess, err := s.GetSession(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, wantSess, gotSess)
	bound, err := s.ConversationSession(ctx, "feishu:oc_1")
	require.NoError(t, err)
	assert.Equal(t, sess.ID, bound)
	gotMsgs, err := s.ListMessages(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, wantMsgs, gotMsgs)
	assert.JSONEq(t, `{"model":"x","citations":[{"n":1,"url":"https://example.com/a","title":"A"}]}`,
		string(gotMsgs[1].Metadata))
	gotRun, err := s.GetRun(ctx, run.ID)
	require.NoError(t, err)
	assert.Equal(t, run, gotRun)
	gotShare, err := s.GetShare(ctx, shareToken)
	require.NoError(t, err)
	assert.Equal(t, share, gotShare)
	fresh, err = s.MarkSeen(ctx, "feishu:om_1", 24*time.Hour)
	require.NoError(t, err)
	assert.False(t, fresh, "dedup survives restart")

	// New messages keep counting up after a reopen.
	m3, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "more"})
	require.NoError(t, err)
	assert.Greater(t, m3.ID, m2.ID)
	h.check(t, s)
}

func testCrashLeftoverRunsBecomeFailed(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	clock := newClock()
	s := h.openAt(t, path, clock)
	sess := newSession(t, s, "u1")

	running1, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop"})
	require.NoError(t, err)
	running2, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "feishu"})
	require.NoError(t, err)
	done, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID})
	require.NoError(t, err)
	done, err = s.FinishRun(ctx, done.ID, store.PhaseCancelled, "cancelled by user", 0)
	require.NoError(t, err)
	assert.Equal(t, 0, s.RecoveredRuns())
	require.NoError(t, s.Close()) // the "crash": the process goes away with runs RUNNING

	clock.Advance(time.Minute)
	restart := clock.Now()
	s = h.openAt(t, path, clock)
	assert.Equal(t, 2, s.RecoveredRuns())
	for _, id := range []string{running1.ID, running2.ID} {
		r, err := s.GetRun(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, store.PhaseFailed, r.Phase)
		assert.Equal(t, "interrupted", r.Error)
		assert.True(t, r.EndedAt.Equal(restart), "EndedAt is the recovery time, got %s", r.EndedAt)
		_, err = s.FinishRun(ctx, id, store.PhaseCompleted, "", 0)
		assert.ErrorIs(t, err, store.ErrConflict, "a recovered run is terminal")
	}
	got, err := s.GetRun(ctx, done.ID)
	require.NoError(t, err)
	assert.Equal(t, done, got, "a finished run is left alone")
	require.NoError(t, s.Close())

	s = h.openAt(t, path, clock)
	assert.Equal(t, 0, s.RecoveredRuns(), "recovery happens once")
	h.check(t, s)
}

func testCancelledContextStartsNoTransaction(t *testing.T, h Harness) {
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	calls := map[string]func() error{
		"Ping":          func() error { return s.Ping(ctx) },
		"CreateSession": func() error { _, err := s.CreateSession(ctx, store.Session{UserID: "u1"}); return err },
		"GetSession":    func() error { _, err := s.GetSession(ctx, sess.ID); return err },
		"AppendMessage": func() error {
			_, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "x"})
			return err
		},
		"MergeMetadata": func() error { return s.MergeMetadata(ctx, 1, nil) },
		"CreateRun":     func() error { _, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID}); return err },
		"CreateUser":    func() error { _, _, err := s.CreateUser(ctx, "bob"); return err },
		"MarkSeen":      func() error { _, err := s.MarkSeen(ctx, "k", time.Hour); return err },
		"PruneSeen":     func() error { _, err := s.PruneSeen(ctx); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, call(), context.Canceled)
		})
	}
	msgs, err := s.ListMessages(context.Background(), sess.ID)
	require.NoError(t, err)
	assert.Empty(t, msgs, "nothing was written")
	n, err := s.CountUsers(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n)
}

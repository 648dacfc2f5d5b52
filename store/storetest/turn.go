package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The per-turn write path (StartTurn, AppendMessages) and the dialog lines of the history window.

func testStartTurnStoresQuestionAndRunTogether(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")

	m, r, err := s.StartTurn(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "问题", Metadata: json.RawMessage(`{ "editOf": 3 }`)},
		store.Run{Channel: "desktop"})
	require.NoError(t, err)
	require.NotZero(t, m.ID)
	require.NotEmpty(t, r.ID)
	assert.Equal(t, r.ID, m.RunID, "the question belongs to its run")
	assert.Equal(t, m.ID, r.UserMessageID, "the run points at its question")
	assert.Equal(t, sess.ID, r.SessionID)
	assert.Equal(t, store.PhaseRunning, r.Phase)
	assert.Equal(t, `{"editOf":3}`, string(m.Metadata), "metadata compacted as by AppendMessage")
	assert.Equal(t, m.CreatedAt, r.StartedAt)

	got, err := s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, r, got)
	msg, err := s.GetMessage(ctx, m.ID)
	require.NoError(t, err)
	assert.Equal(t, m, msg)
	assert.True(t, h.stored(t, s, "running", r.ID))
	active, err := s.ActiveRun(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, r.ID, active.ID)
	own, err := s.ListRunMessages(ctx, r.ID)
	require.NoError(t, err)
	require.Len(t, own, 1)
	assert.Equal(t, m.ID, own[0].ID)

	// A caller-chosen run id is kept, and the message may name it already.
	m2, r2, err := s.StartTurn(ctx, store.Message{SessionID: sess.ID, RunID: "run-2", Role: store.RoleUser, Content: "再问"}, store.Run{ID: "run-2"})
	require.NoError(t, err)
	assert.Equal(t, "run-2", r2.ID)
	assert.Equal(t, "run-2", m2.RunID)
	assert.Greater(t, m2.ID, m.ID)
	h.check(t, s)
}

func testStartTurnAllOrNothing(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")
	_, first, err := s.StartTurn(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q"}, store.Run{})
	require.NoError(t, err)
	last, err := s.LastMessageID(ctx, sess.ID)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		m    store.Message
		r    store.Run
		want error
	}{
		{"existing run id", store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q"}, store.Run{ID: first.ID}, store.ErrConflict},
		{"unknown session", store.Message{SessionID: "nope", Role: store.RoleUser, Content: "q"}, store.Run{}, store.ErrNotFound},
		{"not a USER message", store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: "a"}, store.Run{}, store.ErrInvalid},
		{"run of another session", store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q"}, store.Run{SessionID: "other"}, store.ErrInvalid},
		{"message of another run", store.Message{SessionID: sess.ID, RunID: "a", Role: store.RoleUser, Content: "q"}, store.Run{ID: "b"}, store.ErrInvalid},
		{"metadata not an object", store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q", Metadata: json.RawMessage(`[1]`)}, store.Run{}, store.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.StartTurn(ctx, tc.m, tc.r)
			require.ErrorIs(t, err, tc.want)
			now, err := s.LastMessageID(ctx, sess.ID)
			require.NoError(t, err)
			assert.Equal(t, last, now, "no question was written")
			runs, err := s.ListRuns(ctx, sess.ID)
			require.NoError(t, err)
			assert.Len(t, runs, 1, "no run was written")
		})
	}
	h.check(t, s)
}

func testStartedTurnSurvivesACrash(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	s := h.openAt(t, path, nil)
	sess := newSession(t, s, "u1")
	m, r, err := s.StartTurn(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q"}, store.Run{Channel: "desktop"})
	require.NoError(t, err)
	// The process "dies" while the run executes: its question and run are on disk, and the next
	// start fails the run as interrupted.
	require.NoError(t, s.Close())
	s = h.openAt(t, path, nil)
	assert.Equal(t, 1, s.RecoveredRuns())
	got, err := s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseFailed, got.Phase)
	assert.Equal(t, "interrupted", got.Error)
	assert.Equal(t, m.ID, got.UserMessageID)
	msg, err := s.GetMessage(ctx, m.ID)
	require.NoError(t, err)
	assert.Equal(t, "q", msg.Content)
	h.check(t, s)
}

func testAppendMessagesInOneStep(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess := newSession(t, s, "u1")
	_, r, err := s.StartTurn(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q"}, store.Run{})
	require.NoError(t, err)
	clock.Advance(1e9)
	round := []store.Message{
		{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, Content: "looking",
			ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"a"}`}, {ID: "c2", Name: "open_web_page", Arguments: `{}`}}},
		{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, ToolCallID: "c1", ToolName: "web_search", Content: `{"results":[]}`},
		{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, ToolCallID: "c2", ToolName: "open_web_page", Content: `{"error":"x"}`,
			CreatedAt: clock.Now().Add(5e8), Metadata: json.RawMessage(` {"k": [1, 2]} `)},
	}
	out, err := s.AppendMessages(ctx, round)
	require.NoError(t, err)
	require.Len(t, out, 3)
	for i := range out {
		if i > 0 {
			assert.Greater(t, out[i].ID, out[i-1].ID, "ids ascend in the given order")
		}
		got, err := s.GetMessage(ctx, out[i].ID)
		require.NoError(t, err)
		assert.Equal(t, out[i], got)
		assert.Equal(t, round[i].Content, got.Content)
		assert.Equal(t, round[i].ToolCalls, got.ToolCalls)
	}
	assert.Equal(t, clock.Now(), out[0].CreatedAt, "CreatedAt defaults to now")
	assert.Equal(t, clock.Now().Add(5e8), out[2].CreatedAt, "a given CreatedAt is kept")
	assert.Equal(t, `{"k":[1,2]}`, string(out[2].Metadata))
	own, err := s.ListRunMessages(ctx, r.ID)
	require.NoError(t, err)
	require.Len(t, own, 4)
	all, err := s.ListMessages(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, own, all)
	got, err := s.GetSession(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, clock.Now(), got.UpdatedAt, "the session's activity is bumped")

	// Nothing at all is written when any message is refused, or for an empty batch.
	empty, err := s.AppendMessages(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, empty)
	other := newSession(t, s, "u1")
	for _, tc := range []struct {
		name string
		ms   []store.Message
		want error
	}{
		{"two sessions", []store.Message{{SessionID: sess.ID, Role: store.RoleUser, Content: "a"}, {SessionID: other.ID, Role: store.RoleUser, Content: "b"}}, store.ErrInvalid},
		{"a bad role", []store.Message{{SessionID: sess.ID, Role: store.RoleUser, Content: "a"}, {SessionID: sess.ID, Role: "SYSTEM", Content: "b"}}, store.ErrInvalid},
		{"bad metadata", []store.Message{{SessionID: sess.ID, Role: store.RoleUser, Content: "a"}, {SessionID: sess.ID, Role: store.RoleTool, Metadata: json.RawMessage(`"x"`)}}, store.ErrInvalid},
		{"unknown session", []store.Message{{SessionID: "nope", Role: store.RoleUser, Content: "a"}}, store.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.AppendMessages(ctx, tc.ms)
			require.ErrorIs(t, err, tc.want)
			now, err := s.ListMessages(ctx, sess.ID)
			require.NoError(t, err)
			assert.Len(t, now, 4)
			none, err := s.ListMessages(ctx, other.ID)
			require.NoError(t, err)
			assert.Empty(t, none)
		})
	}
	h.check(t, s)
}

func testConcurrentTurnsKeepSessionOrder(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	const sessions, turns = 4, 10
	var wg sync.WaitGroup
	sids := make([]string, sessions)
	for i := range sessions {
		sids[i] = newSession(t, s, "u1").ID
	}
	for w := range sessions * 2 {
		wg.Go(func() {
			sid := sids[w%sessions]
			for i := range turns {
				m, r, err := s.StartTurn(ctx, store.Message{SessionID: sid, Role: store.RoleUser, Content: fmt.Sprintf("q%d-%d", w, i)}, store.Run{})
				if !assert.NoError(t, err) {
					return
				}
				out, err := s.AppendMessages(ctx, []store.Message{
					{SessionID: sid, RunID: r.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "t"}}},
					{SessionID: sid, RunID: r.ID, Role: store.RoleTool, ToolCallID: "c", Content: "{}"},
				})
				if !assert.NoError(t, err) {
					return
				}
				assert.Less(t, m.ID, out[0].ID)
				assert.Less(t, out[0].ID, out[1].ID)
			}
		})
	}
	wg.Wait()
	for _, sid := range sids {
		all, err := s.ListMessages(ctx, sid)
		require.NoError(t, err)
		assert.Len(t, all, 2*turns*3)
		for i := 1; i < len(all); i++ {
			assert.Less(t, all[i-1].ID, all[i].ID)
		}
	}
	h.check(t, s)
}

func testDialogLinesMatchTheDialog(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")
	meta := json.RawMessage(`{"citations":[{"n":1,"url":"https://a.example/","excerpt":"\"interrupted\": true"}]}`)
	for i := range 7 {
		_, r, err := s.StartTurn(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprintf("q%d", i)}, store.Run{})
		require.NoError(t, err)
		_, err = s.AppendMessages(ctx, []store.Message{
			{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "web_search"}}},
			{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, ToolCallID: "c", ToolName: "web_search", Content: `{"results":[]}`},
		})
		require.NoError(t, err)
		c := store.Conclusion{RunID: r.ID, Phase: store.PhaseCompleted,
			Final: &store.Message{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, Content: fmt.Sprintf("a%d[^1^]", i), Metadata: meta}}
		if i == 4 {
			c = store.Conclusion{RunID: r.ID, Phase: store.PhaseCancelled,
				Final: &store.Message{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, Content: "partial", Metadata: json.RawMessage(`{"interrupted":true}`)}}
		}
		_, _, err = s.ConcludeRun(ctx, c)
		require.NoError(t, err)
	}
	// A message appended on its own, without a run, is part of the dialog too.
	_, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: "note", Metadata: json.RawMessage(`{"interrupted":false}`)})
	require.NoError(t, err)

	// Page through both reads: the same messages, the lines carrying what the window reads.
	var before uint64
	pages := 0
	for {
		full, err := s.ListDialogBefore(ctx, sess.ID, before, 4)
		require.NoError(t, err)
		lines, err := s.ListDialogLinesBefore(ctx, sess.ID, before, 4)
		require.NoError(t, err)
		require.Len(t, lines, len(full))
		for i, m := range full {
			l := lines[i]
			assert.Equal(t, m.ID, l.ID)
			assert.Equal(t, m.RunID, l.RunID)
			assert.Equal(t, m.Role, l.Role)
			assert.Equal(t, m.Content, l.Content)
			assert.Equal(t, m.Content == "partial", l.Interrupted, "message %q", m.Content)
		}
		if len(full) < 4 {
			break
		}
		before = full[0].ID
		pages++
	}
	assert.Equal(t, 3, pages, "15 dialog messages in pages of 4")

	// A metadata merge that marks or unmarks "interrupted" is seen by the next read.
	last, err := s.ListDialogLinesBefore(ctx, sess.ID, 0, 1)
	require.NoError(t, err)
	require.Len(t, last, 1)
	require.NoError(t, s.MergeMetadata(ctx, last[0].ID, map[string]json.RawMessage{"interrupted": json.RawMessage(`true`)}))
	again, err := s.ListDialogLinesBefore(ctx, sess.ID, 0, 1)
	require.NoError(t, err)
	assert.True(t, again[0].Interrupted)
	require.NoError(t, s.MergeMetadata(ctx, last[0].ID, map[string]json.RawMessage{"interrupted": json.RawMessage(`false`)}))
	again, err = s.ListDialogLinesBefore(ctx, sess.ID, 0, 1)
	require.NoError(t, err)
	assert.False(t, again[0].Interrupted)

	_, err = s.ListDialogLinesBefore(ctx, sess.ID, 0, 0)
	require.ErrorIs(t, err, store.ErrInvalid)
	_, err = s.ListDialogLinesBefore(ctx, "nope", 0, 5)
	require.ErrorIs(t, err, store.ErrNotFound)
	empty := newSession(t, s, "u1")
	none, err := s.ListDialogLinesBefore(ctx, empty.ID, 0, 5)
	require.NoError(t, err)
	assert.Empty(t, none)

	// A deleted chat leaves no dialog behind.
	_, err = s.DeleteChat(ctx, sess.ID, "u1")
	require.NoError(t, err)
	_, err = s.ListDialogLinesBefore(ctx, sess.ID, 0, 5)
	require.ErrorIs(t, err, store.ErrNotFound)
	h.check(t, s)
}

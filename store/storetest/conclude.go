package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testConcludeRunWritesAnswerPhaseAndMetadataTogether(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")
	r := startRun(t, s, sess)
	tool, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, ToolName: "web_search", Content: "{}"})
	require.NoError(t, err)

	meta := json.RawMessage(`{"citations": [{"n":1,"url":"https://a.example/"}], "links":{"hidden":0,"allowed":[]}}`)
	run, final, err := s.ConcludeRun(ctx, store.Conclusion{
		RunID: r.ID, Phase: store.PhaseCompleted,
		Final:       &store.Message{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, Content: "A[^1^]", Metadata: meta},
		MarkersSeen: 2, MarkersKept: 1, MarkersDropped: 1,
	})
	require.NoError(t, err)
	assert.Greater(t, final.ID, tool.ID)
	assert.Equal(t, store.PhaseCompleted, run.Phase)
	assert.Equal(t, final.ID, run.FinalMessageID)
	assert.Equal(t, [3]int{2, 1, 1}, [3]int{run.MarkersSeen, run.MarkersKept, run.MarkersDropped})
	assert.False(t, run.EndedAt.IsZero())

	got, err := s.GetRun(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, run, got)
	msg, err := s.GetMessage(ctx, final.ID)
	require.NoError(t, err)
	assert.Equal(t, `{"citations":[{"n":1,"url":"https://a.example/"}],"links":{"hidden":0,"allowed":[]}}`, string(msg.Metadata))
	assert.Equal(t, final, msg)
	assert.False(t, h.stored(t, s, "running", r.ID), "off the running list")

	// The run's own messages through the run index: the tool result and the answer, not the USER
	// message written before the run existed.
	own, err := s.ListRunMessages(ctx, r.ID)
	require.NoError(t, err)
	require.Len(t, own, 2)
	assert.Equal(t, []uint64{tool.ID, final.ID}, []uint64{own[0].ID, own[1].ID})

	// A second conclusion is refused and writes nothing: no second answer appears.
	_, _, err = s.ConcludeRun(ctx, store.Conclusion{RunID: r.ID, Phase: store.PhaseFailed,
		Final: &store.Message{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, Content: "again"}})
	require.ErrorIs(t, err, store.ErrConflict)
	all, err := s.ListMessages(ctx, sess.ID)
	require.NoError(t, err)
	assert.Len(t, all, 3)
	h.check(t, s)
}

func testConcludeRunWithoutFinalAndRecovery(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	s := h.openAt(t, path, nil)
	sess := newSession(t, s, "u1")
	failed := startRun(t, s, sess)
	left := startRun(t, s, sess)

	run, final, err := s.ConcludeRun(ctx, store.Conclusion{RunID: failed.ID, Phase: store.PhaseFailed, Error: "model down"})
	require.NoError(t, err)
	assert.Zero(t, final.ID)
	assert.Zero(t, run.FinalMessageID)
	assert.Equal(t, "model down", run.Error)

	// A run left RUNNING by a "crash" is recovered as FAILED, and has no answer.
	require.NoError(t, s.Close())
	s = h.openAt(t, path, nil)
	assert.Equal(t, 1, s.RecoveredRuns())
	got, err := s.GetRun(ctx, left.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseFailed, got.Phase)
	assert.Zero(t, got.FinalMessageID)
}

func testConcludeRunRejectsBadInput(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")
	other := newSession(t, s, "u2")
	r := startRun(t, s, sess)
	tests := []struct {
		name string
		c    store.Conclusion
		want error
	}{
		{"not terminal", store.Conclusion{RunID: r.ID, Phase: store.PhaseRunning}, store.ErrInvalid},
		{"negative counts", store.Conclusion{RunID: r.ID, Phase: store.PhaseCompleted, MarkersSeen: -1}, store.ErrInvalid},
		{"unknown run", store.Conclusion{RunID: "nope", Phase: store.PhaseFailed}, store.ErrNotFound},
		{"final not an answer", store.Conclusion{RunID: r.ID, Phase: store.PhaseCompleted,
			Final: &store.Message{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, Content: "x"}}, store.ErrInvalid},
		{"final of another run", store.Conclusion{RunID: r.ID, Phase: store.PhaseCompleted,
			Final: &store.Message{SessionID: sess.ID, RunID: "other", Role: store.RoleAssistant, Content: "x"}}, store.ErrInvalid},
		{"final in another session", store.Conclusion{RunID: r.ID, Phase: store.PhaseCompleted,
			Final: &store.Message{SessionID: other.ID, RunID: r.ID, Role: store.RoleAssistant, Content: "x"}}, store.ErrInvalid},
		{"metadata not an object", store.Conclusion{RunID: r.ID, Phase: store.PhaseCompleted,
			Final: &store.Message{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, Content: "x", Metadata: json.RawMessage(`[1]`)}}, store.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.ConcludeRun(ctx, tc.c)
			require.ErrorIs(t, err, tc.want)
			got, err := s.GetRun(ctx, r.ID)
			require.NoError(t, err)
			assert.Equal(t, store.PhaseRunning, got.Phase, "nothing written")
			all, err := s.ListMessages(ctx, sess.ID)
			require.NoError(t, err)
			assert.Len(t, all, 1)
		})
	}
}

func testListMessagesBeforePages(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	a := newSession(t, s, "u1")
	b := newSession(t, s, "u1")
	// Interleave two sessions so that a page must not run into the neighbour's keys.
	all := fillSession(t, s, a, 3)
	fillSession(t, s, b, 2)
	all = append(all, fillSession(t, s, a, 2)...)

	page, err := s.ListMessagesBefore(ctx, a.ID, 0, 6)
	require.NoError(t, err)
	assert.Equal(t, ids(all[len(all)-6:]), ids(page), "the newest page, ascending")
	var got []store.Message
	cursor := uint64(0)
	for {
		page, err := s.ListMessagesBefore(ctx, a.ID, cursor, 7)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		got = append(page, got...)
		cursor = page[0].ID
	}
	assert.Equal(t, ids(all), ids(got), "walking back page by page yields the whole session once")

	dialog, err := s.ListDialogBefore(ctx, a.ID, 0, 4)
	require.NoError(t, err)
	n := len(all)
	assert.Equal(t, ids([]store.Message{all[n-8], all[n-5], all[n-4], all[n-1]}), ids(dialog), "the last two turns' questions and answers")
	dialog, err = s.ListDialogBefore(ctx, a.ID, dialog[0].ID, 100)
	require.NoError(t, err)
	assert.Len(t, dialog, 6, "USER and answers of the three earlier turns, no tool traffic")

	_, err = s.ListMessagesBefore(ctx, "missing", 0, 5)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ListMessagesBefore(ctx, a.ID, 0, 0)
	require.ErrorIs(t, err, store.ErrInvalid)
	empty := newSession(t, s, "u1")
	page, err = s.ListMessagesBefore(ctx, empty.ID, 0, 5)
	require.NoError(t, err)
	assert.Empty(t, page)
	// The session sorting right after a's id must not leak into a's first page either.
	page, err = s.ListMessagesBefore(ctx, a.ID, all[0].ID, 5)
	require.NoError(t, err)
	assert.Empty(t, page)
}

func startRun(t *testing.T, s store.Backend, sess store.Session) store.Run {
	t.Helper()
	ctx := context.Background()
	u, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q"})
	require.NoError(t, err)
	r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: u.ID})
	require.NoError(t, err)
	return r
}

// fillSession appends n turns (USER, ASSISTANT with a tool call, TOOL, ASSISTANT answer) to sess.
func fillSession(t *testing.T, s store.Backend, sess store.Session, turns int) []store.Message {
	t.Helper()
	ctx := context.Background()
	var out []store.Message
	for i := range turns {
		for _, m := range []store.Message{
			{Role: store.RoleUser, Content: fmt.Sprintf("q%d", i)},
			{Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "web_search", Arguments: "{}"}}},
			{Role: store.RoleTool, ToolName: "web_search", ToolCallID: "c", Content: `{"results":[]}`},
			{Role: store.RoleAssistant, Content: fmt.Sprintf("a%d", i)},
		} {
			m.SessionID = sess.ID
			m.RunID = "run" + strconv.Itoa(i)
			stored, err := s.AppendMessage(ctx, m)
			require.NoError(t, err)
			out = append(out, stored)
		}
	}
	return out
}

func ids(ms []store.Message) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

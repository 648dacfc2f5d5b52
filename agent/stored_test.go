package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// acceptTurns stores n chat turns of one conversation the way the gateway accepts them, before the
// agent has run any of them.
func acceptTurns(t *testing.T, st *store.Store, n int) []store.Accepted {
	t.Helper()
	out := make([]store.Accepted, n)
	for i := range n {
		acc, err := st.AcceptInbound(context.Background(), store.Inbound{
			SeenKey: fmt.Sprintf("msg:feishu:om_%d", i), SeenTTL: time.Hour, Conversation: "feishu:oc_1",
			Create: &store.Session{UserID: "feishu:oc_1", Channel: "feishu"},
			Turn:   &store.InboundTurn{Channel: "feishu", Text: fmt.Sprintf("问题 %d", i)},
		})
		require.NoError(t, err)
		out[i] = acc
	}
	return out
}

func storedTurn(acc store.Accepted, text string, sink Sink) Turn {
	return Turn{SessionID: acc.SessionID, Text: text, Channel: "feishu", Sink: sink, RunID: acc.Run.ID, UserMessageID: acc.UserMessage.ID}
}

// TestStoredTurnsRunTheAcceptedRecord: turns stored on arrival (all three questions before any
// answer) run as the runs the store holds — no second USER message, no second run — and each
// model request sees the earlier questions each followed by its own answer, never a later question.
func TestStoredTurnsRunTheAcceptedRecord(t *testing.T) {
	st := openStore(t)
	accepted := acceptTurns(t, st, 3)
	sid := accepted[0].SessionID
	llm := newFakeLLM(t, textStream("答案 0"), textStream("答案 1"), textStream("答案 2"))
	a := newAgent(t, Config{Store: st, Model: llm.model(t)})
	rec := &recorder{}
	var handles []*RunHandle
	for i, acc := range accepted {
		h, err := a.Submit(context.Background(), storedTurn(acc, fmt.Sprintf("问题 %d", i), rec.sink))
		require.NoError(t, err)
		assert.Equal(t, acc.Run.ID, h.ID, "the agent runs the stored run")
		handles = append(handles, h)
	}
	for i, h := range handles {
		out := wait(t, h)
		require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
		assert.Equal(t, accepted[i].UserMessage.ID, out.UserMessageID)
		evs := rec.ofRun(h.ID)
		require.NotEmpty(t, evs)
		assert.Equal(t, EventRunStarted, evs[0].Type)
		assert.Equal(t, accepted[i].UserMessage.ID, evs[0].UserMessageID)
		run, err := st.GetRun(context.Background(), h.ID)
		require.NoError(t, err)
		assert.Equal(t, store.PhaseCompleted, run.Phase)
		assert.Equal(t, out.FinalMessageID, run.FinalMessageID)
	}

	runs, err := st.ListRuns(context.Background(), sid)
	require.NoError(t, err)
	assert.Len(t, runs, 3, "no run besides the stored ones")
	msgs, err := st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	users := 0
	for _, m := range msgs {
		if m.Role == store.RoleUser {
			users++
		}
	}
	assert.Equal(t, 3, users, "no USER message besides the stored ones")

	want := [][]string{
		{"user:问题 0"},
		{"user:问题 0", "assistant:答案 0", "user:问题 1"},
		{"user:问题 0", "assistant:答案 0", "user:问题 1", "assistant:答案 1", "user:问题 2"},
	}
	require.Equal(t, 3, llm.requestCount())
	for i := range want {
		var got []string
		for _, m := range llm.messages(i)[1:] {
			got = append(got, fmt.Sprintf("%s:%s", m["role"], m["content"]))
		}
		assert.Equal(t, want[i], got, "request %d", i)
	}
}

// TestStoredTurnCancelledWhileQueuedIsConcluded: a stored run the agent never started (the agent
// closed first) ends CANCELLED in the store instead of staying RUNNING.
func TestStoredTurnCancelledWhileQueuedIsConcluded(t *testing.T) {
	st := openStore(t)
	accepted := acceptTurns(t, st, 2)
	hold := make(chan struct{})
	llm := newFakeLLM(t, reply{chunks: []string{chunk(map[string]any{"content": "部分"}, nil)}, hold: hold})
	a := newAgent(t, Config{Store: st, Model: llm.model(t)})
	started := make(chan struct{}, 1)
	h0, err := a.Submit(context.Background(), storedTurn(accepted[0], "问题 0", func(ev Event) {
		if ev.Type == EventAnswerDelta {
			select {
			case started <- struct{}{}:
			default:
			}
		}
	}))
	require.NoError(t, err)
	h1, err := a.Submit(context.Background(), storedTurn(accepted[1], "问题 1", nil))
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first run never streamed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, a.Close(ctx))
	close(hold)
	for i, h := range []*RunHandle{h0, h1} {
		assert.Equal(t, store.PhaseCancelled, wait(t, h).Phase)
		run, err := st.GetRun(context.Background(), accepted[i].Run.ID)
		require.NoError(t, err)
		assert.Equal(t, store.PhaseCancelled, run.Phase, "run %d", i)
	}
}

func TestStoredTurnNeedsItsRunID(t *testing.T) {
	st := openStore(t)
	a := newAgent(t, Config{Store: st, Model: newFakeLLM(t).model(t)})
	_, err := a.Submit(context.Background(), Turn{SessionID: "s", Text: "问题", UserMessageID: 7})
	assert.ErrorIs(t, err, ErrBadTurn)
	_, err = a.Submit(context.Background(), Turn{SessionID: "s", Text: "问题", RunID: "r"})
	assert.ErrorIs(t, err, ErrBadTurn)
}

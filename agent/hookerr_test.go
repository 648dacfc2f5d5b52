package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// concludeFailStore is the real store whose first conclusion of a run with an answer fails, as a
// full disk would make it.
type concludeFailStore struct{ *store.Store }

func (s concludeFailStore) ConcludeRun(ctx context.Context, c store.Conclusion) (store.Run, store.Message, error) {
	if c.Final != nil {
		return store.Run{}, store.Message{}, errors.New("disk full")
	}
	return s.Store.ConcludeRun(ctx, c)
}

// TestLiveViewFollowsTheRecord: when the conclusion (answer, phase, citations) cannot be stored,
// nothing of it is announced either: no answer.final, no citations event, a FAILED outcome, and the
// record holds the FAILED run without an answer (never an answer under a FAILED run).
func TestLiveViewFollowsTheRecord(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hitInvoice)
	llm := newFakeLLM(t,
		toolStream("", call{id: "call_a", name: "web_search", args: []string{`{"query":"发票"}`}}),
		textStream("应先红冲再重开。[^1^]"),
	)
	rec := &recorder{}
	a := newAgent(t, Config{Store: concludeFailStore{st}, Model: llm.model(t), Tools: []Tool{search}})
	unsub := a.Subscribe(rec.sink)
	defer unsub()

	out := run(t, a, sid, "电子发票抬头写错了怎么办？", nil)
	require.Equal(t, store.PhaseFailed, out.Phase)
	assert.Equal(t, "保存对话失败，请稍后再试。", out.Error, "the user reads a sentence; the store's error goes to the log")
	assert.Empty(t, out.Citations)
	assert.Zero(t, out.FinalMessageID)
	evs := rec.all()
	checkEventOrder(t, evs)
	for _, ev := range evs {
		assert.NotEqual(t, EventAnswerFinal, ev.Type)
		assert.NotEqual(t, EventCitations, ev.Type)
	}
	r, err := st.GetRun(context.Background(), evs[0].RunID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseFailed, r.Phase)
	assert.Zero(t, r.FinalMessageID)
	msgs, err := st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	for _, m := range msgs {
		if m.Role == store.RoleAssistant {
			assert.NotEmpty(t, m.ToolCalls, "no answer stored: %+v", m)
		}
	}
}

package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// gate is a TurnOrder the test opens by hand; it reports each turn that reaches it.
type gate struct {
	reached chan [2]string // session id, run id
	open    chan struct{}
}

func (g *gate) WaitTurn(ctx context.Context, sessionID, runID string) error {
	g.reached <- [2]string{sessionID, runID}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) wait(t *testing.T) [2]string {
	t.Helper()
	select {
	case r := <-g.reached:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no turn reached the turn order")
		return [2]string{}
	}
}

// With a TurnOrder, a desktop turn (not stored by its caller) is stored — its USER message and its
// RUNNING run, its place in the session's order — before it waits, and runs only once the order
// lets it; while it waits it is not the session's running run, so Cancel reaches nothing here.
func TestOrderStoresTheTurnThenWaits(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	llm := newFakeLLM(t, textStream("答案"))
	g := &gate{reached: make(chan [2]string, 4), open: make(chan struct{})}
	a := newAgent(t, Config{Store: st, Model: llm.model(t), Order: g})
	rec := &recorder{}
	h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "问题", Channel: "desktop", Sink: rec.sink, Metadata: []byte(`{"editOf":1}`)})
	require.NoError(t, err)
	at := g.wait(t)
	assert.Equal(t, [2]string{sid, h.ID}, at)
	r, err := st.GetRun(context.Background(), h.ID)
	require.NoError(t, err, "the run is stored before it waits")
	assert.Equal(t, store.PhaseRunning, r.Phase)
	msgs, err := st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, r.UserMessageID, msgs[0].ID)
	assert.Equal(t, "问题", msgs[0].Content)
	assert.JSONEq(t, `{"editOf":1}`, string(msgs[0].Metadata))
	assert.False(t, a.Cancel(sid), "a waiting turn is not running here")
	assert.Zero(t, llm.requestCount(), "nothing runs before the order lets it")
	assert.Empty(t, rec.all())

	close(g.open)
	out := wait(t, h)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	assert.Equal(t, r.UserMessageID, out.UserMessageID)
	evs := rec.ofRun(h.ID)
	require.NotEmpty(t, evs)
	assert.Equal(t, r.UserMessageID, evs[0].UserMessageID)
	msgs, err = st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	assert.Len(t, msgs, 2, "one question, one answer: the run did not store the turn again")
}

// Close ends a wait; the waiting turn ends CANCELLED with its record concluded, as a queued turn.
func TestOrderWaitEndsOnClose(t *testing.T) {
	st := openStore(t)
	accepted := acceptTurns(t, st, 1)
	g := &gate{reached: make(chan [2]string, 4), open: make(chan struct{})}
	a, err := New(Config{Store: st, Model: newFakeLLM(t).model(t), Order: g, Logger: discardLogger()})
	require.NoError(t, err)
	h, err := a.Submit(context.Background(), storedTurn(accepted[0], "问题 0", nil))
	require.NoError(t, err)
	g.wait(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Close(ctx))
	out := wait(t, h)
	assert.Equal(t, store.PhaseCancelled, out.Phase)
	r, err := st.GetRun(context.Background(), accepted[0].Run.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseCancelled, r.Phase)
}

// panicOrder is a TurnOrder with a bug.
type panicOrder struct{}

func (panicOrder) WaitTurn(context.Context, string, string) error { panic("bug in the turn order") }

// A panic in the turn order does not kill the session's worker: the turn runs as without it.
func TestOrderPanicDoesNotStopTheTurn(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	a := newAgent(t, Config{Store: st, Model: newFakeLLM(t, textStream("答案"), textStream("答案二")).model(t), Order: panicOrder{}})
	for _, q := range []string{"问题", "问题二"} {
		h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: q, Channel: "desktop"})
		require.NoError(t, err)
		out := wait(t, h)
		require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	}
	msgs, err := st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	assert.Len(t, msgs, 4, "each turn stored once")
}

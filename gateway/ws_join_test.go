package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// TestDeltasJoinWhileWaiting: answer.delta text queued behind a delta of the same run that the
// write pump has not taken yet joins that frame; another run's delta or any other frame in between
// starts a new one, so order is kept. The joined frame is encoded like every other frame.
func TestDeltasJoinWhileWaiting(t *testing.T) {
	e := newEnv(t)
	c := newClient(e.srv, store.User{ID: "u"}, "zh") // no write pump: everything stays queued
	at := time.Now()
	push := func(sess, run, text string) bool {
		d := &pendingDelta{sessionID: sess, runID: run, text: text, ats: []time.Time{at}}
		data, err := d.encode()
		require.NoError(t, err)
		queued, joined := c.enqueueDelta(d, data)
		require.True(t, queued)
		return joined
	}
	// The first frame is shared with another connection's queue: joining must not change it.
	shared := &pendingDelta{sessionID: "s1", runID: "r1", text: "电子", ats: []time.Time{at}}
	sharedData, err := shared.encode()
	require.NoError(t, err)
	other := newClient(e.srv, store.User{ID: "u"}, "zh")
	other.enqueueDelta(shared, sharedData)
	queued, joined := c.enqueueDelta(shared, sharedData)
	require.True(t, queued)
	assert.False(t, joined, "the first delta is a frame of its own")
	assert.True(t, push("s1", "r1", "发票"))
	assert.True(t, push("s1", "r1", " <b>&"))
	assert.False(t, push("s1", "r2", "x"), "another run's text does not join")
	require.True(t, c.enqueue(outFrame{data: []byte(`{"type":"run.finished"}`)}))
	assert.False(t, push("s1", "r2", "y"), "a frame in between ends the join")

	c.mu.Lock()
	queue := append([]outFrame(nil), c.queue...)
	c.mu.Unlock()
	require.Len(t, queue, 4)
	got, err := queue[0].delta.encode()
	require.NoError(t, err)
	want, err := json.Marshal(&wsFrame{Type: "answer.delta", SessionID: "s1", RunID: "r1", Text: "电子发票 <b>&"})
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	assert.Nil(t, queue[0].data, "a joined frame is encoded when written")
	assert.Len(t, queue[0].delta.ats, 3, "each joined frame is observed in the latency histogram")
	assert.Equal(t, "x", queue[1].delta.text)
	assert.NotNil(t, queue[1].data, "an unjoined frame keeps its shared encoding")
	assert.Nil(t, queue[2].delta)
	assert.Equal(t, "y", queue[3].delta.text)

	other.mu.Lock()
	defer other.mu.Unlock()
	require.Len(t, other.queue, 1)
	assert.Equal(t, "电子", other.queue[0].delta.text, "the other connection's frame is unchanged")
	assert.Equal(t, string(sharedData), string(other.queue[0].data))
	assert.Len(t, other.queue[0].delta.ats, 1)
}

// TestJoinedDeltasCountAgainstTheQueue: text that joins a waiting frame is charged to the queue's
// byte budget, so a client that reads nothing is still dropped.
func TestJoinedDeltasCountAgainstTheQueue(t *testing.T) {
	e := newEnv(t)
	c := newClient(e.srv, store.User{ID: "u"}, "zh")
	chunk := string(make([]byte, 64<<10))
	for i := 0; ; i++ {
		d := &pendingDelta{sessionID: "s", runID: "r", text: chunk, ats: []time.Time{time.Now()}}
		data, err := d.encode()
		require.NoError(t, err)
		queued, _ := c.enqueueDelta(d, data)
		if !queued {
			break
		}
		require.Less(t, i, maxQueuedBytes/len(chunk)+2, "the budget was never reached")
	}
	select {
	case <-c.done:
	default:
		t.Fatal("slow client not dropped")
	}
}

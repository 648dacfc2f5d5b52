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
		queued, joined := c.enqueueDelta(sess, run, text, at)
		require.True(t, queued)
		return joined
	}
	assert.False(t, push("s1", "r1", "电子"), "the first delta is a frame of its own")
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
	assert.Len(t, queue[0].delta.ats, 3, "each joined event is observed in the latency histogram")
	assert.Equal(t, "x", string(queue[1].delta.text))
	assert.Nil(t, queue[2].delta)
	assert.Equal(t, "y", string(queue[3].delta.text))
}

// TestJoinedDeltasCountAgainstTheQueue: text that joins a waiting frame is charged to the queue's
// byte budget, so a client that reads nothing is still dropped.
func TestJoinedDeltasCountAgainstTheQueue(t *testing.T) {
	e := newEnv(t)
	c := newClient(e.srv, store.User{ID: "u"}, "zh")
	chunk := string(make([]byte, 64<<10))
	for i := 0; ; i++ {
		queued, _ := c.enqueueDelta("s", "r", chunk, time.Now())
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

package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestBatchedWritesAreWholeFramesInFewWrites: 300 frames written in one batch (small ones, one
// larger than the buffer, some crossing the flush size) reach a gorilla client whole and in order,
// with a ping written from another goroutine in the middle, in a few socket writes instead of one
// per frame.
func TestBatchedWritesAreWholeFramesInFewWrites(t *testing.T) {
	var frames []string
	total := 0
	for i := range 300 {
		f := fmt.Sprintf(`{"type":"answer.delta","n":%d,"text":"%s"}`, i, strings.Repeat("字", i%40))
		if i == 150 {
			f = fmt.Sprintf(`{"type":"answer.html","html":"%s"}`, strings.Repeat("x", 3*batchFlushBytes))
		}
		frames = append(frames, f)
		total += len(f)
	}
	counted := make(chan *countingConn, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &batchHijacker{ResponseWriter: w}
		conn, err := upgrader.Upgrade(hw, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		cc := &countingConn{Conn: hw.conn.Conn}
		hw.conn.Conn = cc
		hw.conn.begin()
		for i, f := range frames {
			if i == 100 {
				// A control frame from another goroutine lands between two frames.
				done := make(chan error)
				go func() { done <- conn.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(10*time.Second)) }()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}
			if err := conn.WriteMessage(websocket.TextMessage, []byte(f)); err != nil {
				t.Error(err)
				return
			}
		}
		if err := hw.conn.end(); err != nil {
			t.Error(err)
		}
		counted <- cc
		_, _, _ = conn.ReadMessage() // until the client closes
	}))
	defer ts.Close()
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	require.NoError(t, err)
	defer c.Close()
	pinged := false
	c.SetPingHandler(func(string) error { pinged = true; return nil })
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i, want := range frames {
		_, got, err := c.ReadMessage()
		require.NoError(t, err, "frame %d", i)
		require.Equal(t, want, string(got), "frame %d arrives whole and in order", i)
	}
	assert.True(t, pinged, "the ping arrived between frames")
	cc := <-counted
	// The buffer flushes at batchFlushBytes and the large frame goes out on its own.
	assert.LessOrEqual(t, cc.writes.Load(), int64(total/batchFlushBytes+4), "socket writes for %d frames", len(frames))
}

// failingConn fails every write.
type failingConn struct {
	net.Conn
	writes int
}

func (f *failingConn) Write(p []byte) (int, error) {
	f.writes++
	return 0, errors.New("broken pipe")
}

// TestBatchConnStopsAtTheFirstFailedWrite: once a write failed, nothing more reaches the socket,
// so a frame cut short is never followed by other bytes.
func TestBatchConnStopsAtTheFirstFailedWrite(t *testing.T) {
	fc := &failingConn{}
	b := &batchConn{Conn: fc}
	b.begin()
	_, err := b.Write([]byte("frame one"))
	require.NoError(t, err, "buffered")
	require.Error(t, b.end(), "the flush fails")
	_, err = b.Write([]byte("frame two"))
	require.Error(t, err)
	b.begin()
	_, err = b.Write([]byte("frame three"))
	require.Error(t, err)
	require.Error(t, b.end())
	assert.Equal(t, 1, fc.writes, "one write reached the socket")
}

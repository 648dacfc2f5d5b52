package gateway

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serverSide dials a websocket for the user and returns the client end and the gateway's client.
func serverSide(t *testing.T, e *testEnv, userID, tok string) (*websocket.Conn, *client) {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.ts.URL, "http")+"/ws", h)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	var c *client
	require.Eventually(t, func() bool {
		cs := e.srv.hub.clientsOf(userID)
		if len(cs) == 1 {
			c = cs[0]
		}
		return c != nil
	}, 5*time.Second, 5*time.Millisecond)
	require.NotNil(t, c.raw, "loopback TCP connections take the direct path")
	return conn, c
}

// TestAppendFrame: frames built by the direct path are read back by gorilla, across the three
// payload length encodings.
func TestAppendFrame(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	conn, c := serverSide(t, e, u.ID, tok)
	for _, n := range []int{0, 1, 125, 126, 127, 1000, 65535, 65536, 70000} {
		payload := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
		c.wmu.Lock()
		_, err := c.conn.NetConn().Write(appendFrame(nil, payload))
		c.wmu.Unlock()
		require.NoError(t, err)
		mt, got, err := conn.ReadMessage()
		require.NoError(t, err, "length %d", n)
		assert.Equal(t, websocket.TextMessage, mt)
		assert.Equal(t, payload, got, "length %d", n)
	}
}

// TestDirectWriteKeepsOrderAndNeverBlocks: deltas written directly and frames queued for the pump
// (including the rest of a frame the socket only partly took) reach a slow client complete and in
// order, and the producer is never blocked by the client not reading.
func TestDirectWriteKeepsOrderAndNeverBlocks(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	conn, c := serverSide(t, e, u.ID, tok)
	// A small send buffer fills after a few frames, so direct writes go short or find the socket
	// full and fall back to the queue while the client is not reading.
	require.NoError(t, c.conn.NetConn().(*net.TCPConn).SetWriteBuffer(4096))

	const frames = 3000
	pad := strings.Repeat("x", 900)
	want := make([]string, frames)
	start := time.Now()
	for i := range frames {
		f := outFrame{data: fmt.Appendf(nil, `{"type":"answer.delta","n":%d,"text":"%s"}`, i, pad)}
		if i%5 != 4 {
			f.at = time.Now() // a delta: eligible for the direct path
		} else {
			f.data = fmt.Appendf(nil, `{"type":"other","n":%d}`, i)
		}
		want[i] = string(f.data)
		c.enqueue(f)
	}
	assert.Less(t, time.Since(start), 2*time.Second, "the producer never waits for the client")
	c.mu.Lock()
	pending := len(c.queue)
	c.mu.Unlock()
	select {
	case <-c.done:
		t.Fatal("client dropped")
	default:
	}

	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := range frames {
		_, got, err := conn.ReadMessage()
		require.NoError(t, err, "frame %d", i)
		require.Equal(t, want[i], string(got), "frame %d", i)
	}
	t.Logf("%d frames queued behind the full socket when the producer finished", pending)
}

// TestDirectWriteShortAndRefusedWrites drives the three outcomes of the non-blocking write with a
// socket writer that takes a frame whole, only its first half, or nothing (socket full), and has
// another producer enqueue a frame while the write is in progress: the rest of a half-written
// frame and a refused frame both go out before the frame queued during the attempt.
func TestDirectWriteShortAndRefusedWrites(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	conn, c := serverSide(t, e, u.ID, tok)
	sock := c.raw
	var want []string
	calls := 0
	// An idle connection's last socket deadline has passed; neither the direct write nor the
	// pump's write of a cut frame's rest may trip over it.
	expire := func() { require.NoError(t, c.conn.NetConn().SetWriteDeadline(time.Now().Add(-time.Second))) }
	c.raw = func(p []byte) (int, error) {
		calls++
		defer expire()
		// Meanwhile another run of the user produces a frame: it must queue behind this one.
		concurrent := fmt.Appendf(nil, `{"type":"answer.delta","during":%d}`, calls)
		done := make(chan bool)
		go func() { done <- c.enqueue(outFrame{data: concurrent, at: time.Now()}) }()
		assert.True(t, <-done, "a frame produced during a direct write is queued")
		switch calls % 3 {
		case 1:
			return sock(p)
		case 2:
			return sock(p[:len(p)/2])
		default:
			return 0, nil // EAGAIN: the socket took nothing
		}
	}
	for i := range 30 {
		f := fmt.Appendf(nil, `{"type":"answer.delta","n":%d}`, i)
		want = append(want, string(f))
		c.mu.Lock()
		idle := len(c.queue) == 0
		c.mu.Unlock()
		before := calls
		expire()
		c.enqueue(outFrame{data: f, at: time.Now()})
		if idle && calls > before {
			want = append(want, fmt.Sprintf(`{"type":"answer.delta","during":%d}`, calls))
		}
		// Let the pump drain, so the next frame finds the connection idle again.
		require.Eventually(t, func() bool {
			if !c.wmu.TryLock() {
				return false
			}
			defer c.wmu.Unlock()
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.queue) == 0
		}, 5*time.Second, time.Millisecond)
	}
	require.GreaterOrEqual(t, calls, 9, "the direct path was taken")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i, w := range want {
		_, got, err := conn.ReadMessage()
		require.NoError(t, err, "frame %d", i)
		require.Equal(t, w, string(got), "frame %d", i)
	}
}

// TestControlFrameNeverLandsInsideACutFrame: when the direct path wrote only part of a frame, a
// control frame written next (a pong from the read goroutine, a ping from the pump) must not go out
// before the rest of that frame, or the client reads a corrupt stream.
func TestControlFrameNeverLandsInsideACutFrame(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	conn, c := serverSide(t, e, u.ID, tok)
	sock := c.raw
	const rounds = 20
	controls := make(chan error, rounds)
	calls := 0
	c.raw = func(p []byte) (int, error) {
		calls++
		// Another writer (e.g. the read goroutine answering a ping) waits for wmu while this write
		// is in progress; it gets the socket right after the direct path lets go.
		go func() { controls <- c.writeControl(websocket.PingMessage, nil, time.Now().Add(writeWait)) }()
		time.Sleep(10 * time.Millisecond)
		return sock(p[:len(p)/2])
	}
	var want []string
	for i := range rounds {
		f := fmt.Appendf(nil, `{"type":"answer.delta","n":%d,"text":"%s"}`, i, strings.Repeat("y", 200))
		want = append(want, string(f))
		before := calls
		c.enqueue(outFrame{data: f, at: time.Now()})
		// The pump may still hold wmu for a stale wake-up, so the frame went to the queue instead.
		if calls > before {
			require.NoError(t, <-controls)
		}
		require.Eventually(t, func() bool {
			if !c.wmu.TryLock() {
				return false
			}
			defer c.wmu.Unlock()
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.queue) == 0
		}, 5*time.Second, time.Millisecond)
	}
	require.Greater(t, calls, rounds/2, "the direct path was taken")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i, w := range want {
		_, got, err := conn.ReadMessage()
		require.NoError(t, err, "frame %d", i)
		require.Equal(t, w, string(got), "frame %d", i)
	}
}

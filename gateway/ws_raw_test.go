package gateway

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file tests the websocket layer at the level of bytes on the socket: a raw TCP client does
// the opening handshake itself and parses every frame the server sends (RFC 6455 §5), so that a
// control frame inside a data frame, a frame cut short, or any byte after the server's Close frame
// is seen as what it is rather than hidden by a client library.

const (
	opCont  = 0x0
	opText  = 0x1
	opBin   = 0x2
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

type rawFrame struct {
	fin     bool
	op      byte
	payload []byte
}

// rawWS is a websocket client speaking the protocol by hand.
type rawWS struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
	wmu  sync.Mutex
}

// dialRaw opens a websocket to the test server with a hand-written handshake; rcvBuf > 0 shrinks
// the client's socket receive buffer so that a client that does not read backs up quickly.
func dialRaw(t testing.TB, e *testEnv, tok string, rcvBuf int) *rawWS {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	if rcvBuf > 0 {
		require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(rcvBuf))
	}
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	req := "GET /ws HTTP/1.1\r\nHost: " + conn.RemoteAddr().String() + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key) + "\r\n" +
		"Authorization: Bearer " + tok + "\r\n\r\n"
	_, err = conn.Write([]byte(req))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	return &rawWS{t: t, conn: conn, br: br}
}

// writeFrame sends one masked frame (clients must mask, §5.3).
func (r *rawWS) writeFrame(op byte, payload []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	b := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xFFFF:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	mask := make([]byte, 4)
	_, _ = rand.Read(mask)
	b = append(b, mask...)
	for i, c := range payload {
		b = append(b, c^mask[i%4])
	}
	_, err := r.conn.Write(b)
	return err
}

func (r *rawWS) sendClose(code uint16) error {
	return r.writeFrame(opClose, binary.BigEndian.AppendUint16(nil, code))
}

// readFrame reads one server frame. io.EOF means the stream ended on a frame boundary;
// io.ErrUnexpectedEOF means it ended inside a frame.
func (r *rawWS) readFrame() (rawFrame, error) {
	var h [2]byte
	if _, err := io.ReadFull(r.br, h[:1]); err != nil {
		return rawFrame{}, err
	}
	if _, err := io.ReadFull(r.br, h[1:]); err != nil {
		return rawFrame{}, io.ErrUnexpectedEOF
	}
	f := rawFrame{fin: h[0]&0x80 != 0, op: h[0] & 0x0F}
	if h[0]&0x70 != 0 {
		return f, fmt.Errorf("reserved bits set in %#x", h[0])
	}
	if h[1]&0x80 != 0 {
		return f, errors.New("server frame is masked")
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r.br, b[:]); err != nil {
			return f, io.ErrUnexpectedEOF
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r.br, b[:]); err != nil {
			return f, io.ErrUnexpectedEOF
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 64<<20 {
		return f, fmt.Errorf("frame length %d", n)
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r.br, f.payload); err != nil {
		return f, io.ErrUnexpectedEOF
	}
	return f, nil
}

// rawStream is what a client received, parsed and checked against RFC 6455's framing rules.
type rawStream struct {
	messages  []string // text messages, reassembled
	pongs     int
	pings     int
	closeCode int    // 0: no close frame
	afterEnd  error  // how the stream ended: io.EOF, io.ErrUnexpectedEOF, a read error
	violation string // the first framing violation, if any
}

// readStream reads frames until the stream ends, answering the server's pings. onFrame, when set,
// is called after each frame that precedes the server's close (e.g. to send a close after a few
// messages).
func (r *rawWS) readStream(deadline time.Duration, onFrame func(s *rawStream)) rawStream {
	_ = r.conn.SetReadDeadline(time.Now().Add(deadline))
	var s rawStream
	var frag []byte
	inMessage := false
	for {
		f, err := r.readFrame()
		if err != nil {
			s.afterEnd = err
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				var ne net.Error
				if !errors.As(err, &ne) && s.violation == "" {
					s.violation = err.Error()
				}
			}
			return s
		}
		if s.closeCode != 0 {
			if s.violation == "" {
				s.violation = fmt.Sprintf("frame (opcode %#x, %d bytes) after the server's close frame", f.op, len(f.payload))
			}
			continue
		}
		switch f.op {
		case opText, opBin:
			if inMessage && s.violation == "" {
				s.violation = "new data frame inside a fragmented message"
			}
			frag, inMessage = append(frag[:0], f.payload...), !f.fin
		case opCont:
			if !inMessage && s.violation == "" {
				s.violation = "continuation frame outside a message"
			}
			frag = append(frag, f.payload...)
			inMessage = !f.fin
		case opClose, opPing, opPong:
			if (!f.fin || len(f.payload) > 125) && s.violation == "" {
				s.violation = "fragmented or oversized control frame"
			}
			switch f.op {
			case opClose:
				s.closeCode = 1005
				if len(f.payload) >= 2 {
					s.closeCode = int(binary.BigEndian.Uint16(f.payload))
				}
				if inMessage && s.violation == "" {
					// Allowed by the RFC (control frames may sit between fragments), but the
					// message never completes: report it, gorilla never does this.
					s.violation = "close frame inside a fragmented message"
				}
			case opPing:
				s.pings++
				_ = r.writeFrame(opPong, f.payload)
			case opPong:
				s.pongs++
			}
			if onFrame != nil && s.closeCode == 0 {
				onFrame(&s)
			}
			continue
		default:
			if s.violation == "" {
				s.violation = fmt.Sprintf("unknown opcode %#x", f.op)
			}
			continue
		}
		if inMessage {
			if onFrame != nil {
				onFrame(&s)
			}
			continue
		}
		msg := string(frag)
		if (!utf8.ValidString(msg) || !json.Valid(frag)) && s.violation == "" {
			s.violation = fmt.Sprintf("text message %d is not a JSON frame: %.80q", len(s.messages), msg)
		}
		s.messages = append(s.messages, msg)
		if onFrame != nil {
			onFrame(&s)
		}
	}
}

// serverClient waits for the gateway's client of the user's newest connection.
func serverClient(t testing.TB, e *testEnv, userID string, n int) *client {
	t.Helper()
	var c *client
	require.Eventually(t, func() bool {
		cs := e.srv.hub.clientsOf(userID)
		if len(cs) == n {
			for _, x := range cs {
				x.mu.Lock()
				ready := x.conn != nil
				x.mu.Unlock()
				if ready {
					c = x
				}
			}
		}
		return c != nil
	}, 30*time.Second, time.Millisecond)
	return c
}

// smallBacklog reports whether c's send queue holds less than what the loopback socket's buffers
// take in without blocking. Keeping the backlog this small means the server never sits in a blocked
// write when the client's close arrives: with a backlog of megabytes (allowed by the 8 MiB queue) a
// reader the busy machine did not schedule for a second left the write pump blocked on a full
// socket, gorilla's close reply gave up after its one-second wait, and the test saw no close frame
// at all (close code 0; once, with a second race suite beside it).
func smallBacklog(c *client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) < 256 && c.qBytes < 64<<10
}

func deltaFrame(i int, pad string) []byte {
	return fmt.Appendf(nil, `{"type":"answer.delta","n":%d,"text":"%s"}`, i, pad)
}

// TestWSRawSlowClientDropped: a client that stops reading is dropped once its queue is full. What
// it then reads is a clean prefix of its frames followed by one close frame (1008) and nothing
// else: no close frame inside a half-written text frame, no byte after the close.
func TestWSRawSlowClientDropped(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	raw := dialRaw(t, e, tok, 4096)
	c := serverClient(t, e, u.ID, 1)
	require.NoError(t, rawConn(c.conn.NetConn()).(*net.TCPConn).SetWriteBuffer(4096))

	pad := strings.Repeat("x", 1000)
	var produced []string
	for i := 0; i < 4*maxQueuedFrames; i++ {
		f := deltaFrame(i, pad)
		produced = append(produced, string(f))
		c.enqueue(outFrame{data: f}) // a delta, as runs produce them
		select {
		case <-c.done:
		default:
			continue
		}
		break
	}
	select {
	case <-c.done:
	default:
		t.Fatal("a client that never reads was not dropped")
	}
	s := raw.readStream(30*time.Second, nil)
	require.Empty(t, s.violation)
	require.NotEmpty(t, s.messages, "the frames written before the drop arrive")
	for i, m := range s.messages {
		require.Equal(t, produced[i], m, "frame %d: frames arrive whole and in order", i)
	}
	assert.Equal(t, 1008, s.closeCode, "the drop is announced with a close frame")
	assert.ErrorIs(t, s.afterEnd, io.EOF, "the stream ends right after the close frame")
}

// TestWSRawControlFramesBetweenDataFrames: while the server streams large (fragmented) messages,
// the client pings it continuously, so pongs are written from the read goroutine while the write
// pump is inside messages. Every pong must sit between frames, every message arrive whole.
func TestWSRawControlFramesBetweenDataFrames(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	raw := dialRaw(t, e, tok, 8192)
	c := serverClient(t, e, u.ID, 1)
	require.NoError(t, rawConn(c.conn.NetConn()).(*net.TCPConn).SetWriteBuffer(8192))

	const messages, pings = 60, 300
	pad := strings.Repeat("z", 40<<10) // > the 4 KiB write buffer: gorilla fragments it
	var produced []string
	for i := range messages {
		f := deltaFrame(i, pad)
		produced = append(produced, string(f))
		require.True(t, c.enqueue(outFrame{data: f}))
	}
	go func() {
		for i := range pings {
			if raw.writeFrame(opPing, fmt.Appendf(nil, "p%d", i)) != nil {
				return
			}
		}
	}()
	closed := false
	s := raw.readStream(30*time.Second, func(s *rawStream) {
		if !closed && len(s.messages) == messages && s.pongs == pings {
			// Everything arrived: say goodbye so the stream ends.
			closed = true
			_ = raw.sendClose(1000)
		}
	})
	require.Empty(t, s.violation)
	require.Len(t, s.messages, messages)
	for i, m := range s.messages {
		require.Equal(t, produced[i], m, "message %d", i)
	}
	assert.Equal(t, pings, s.pongs, "every ping answered")
	assert.Equal(t, 1000, s.closeCode, "the server echoes the client's close code")
	assert.ErrorIs(t, s.afterEnd, io.EOF)
}

// TestWSRawCloseWhileStreaming: clients close (with a close frame, or by dropping the TCP
// connection) while deltas stream to them. No data frame follows the server's close frame; every
// connection is released; the producer is never blocked.
func TestWSRawCloseWhileStreaming(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	const conns = 40
	for k := range conns {
		raw := dialRaw(t, e, tok, 0)
		c := serverClient(t, e, u.ID, 1)
		stop := make(chan struct{})
		producerDone := make(chan struct{})
		go func() {
			defer close(producerDone)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Keep the backlog small: this test is about a close while frames stream, not about
				// dropping a reader a busy machine did not schedule in time (that is
				// TestWSRawSlowClientDropped) nor about a close behind megabytes of backlog (see
				// smallBacklog). Without this the verdict depended on the load.
				if !smallBacklog(c) {
					select {
					case <-stop:
						return
					case <-c.done:
						return
					case <-time.After(200 * time.Microsecond):
					}
					continue
				}
				if !c.enqueue(outFrame{data: deltaFrame(i, "abc")}) {
					select {
					case <-c.done:
						return
					default:
					}
				}
			}
		}()
		abrupt := k%4 == 3
		var s rawStream
		if abrupt {
			// Read a little, then vanish without a close frame.
			_, err := raw.readFrame()
			require.NoError(t, err)
			require.NoError(t, raw.conn.Close())
		} else {
			sent := false
			s = raw.readStream(30*time.Second, func(s *rawStream) {
				if !sent && len(s.messages) == 3+k%5 {
					sent = true
					require.NoError(t, raw.sendClose(1000))
				}
			})
		}
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			t.Fatal("the closed connection was not released")
		}
		close(stop)
		<-producerDone
		if !abrupt {
			require.Empty(t, s.violation, "connection %d", k)
			require.Equal(t, 1000, s.closeCode, "connection %d", k)
			require.ErrorIs(t, s.afterEnd, io.EOF, "connection %d", k)
		}
		require.Eventually(t, func() bool { return len(e.srv.hub.clientsOf(u.ID)) == 0 }, 30*time.Second, time.Millisecond)
	}
}

// TestWSRawCloseRaceEndToEnd: many connections run real turns through the agent and close while
// the answer streams; none of them receives a data frame after the server's close frame.
func TestWSRawCloseRaceEndToEnd(t *testing.T) {
	e := newEnv(t, func(_ *Config, a *agentCfg) {
		a.Model = &scriptedModel{answer: func(q string, _ []string) string {
			return strings.Repeat("这是一段很长的回答。", 60) + "[^1^]"
		}}
	}, func(c *Config, _ *agentCfg) { c.MaxConnsPerUser = 1000 })
	const conns = 60
	var wg sync.WaitGroup
	results := make([]rawStream, conns)
	for k := range conns {
		_, tok := e.user(fmt.Sprintf("u%d", k))
		raw := dialRaw(t, e, tok, 0)
		wg.Go(func() {
			require.NoError(t, raw.writeFrame(opText, []byte(`{"type":"chat.send","text":"问题"}`)))
			deltas, seen := 0, 0
			closed := false
			results[k] = raw.readStream(60*time.Second, func(s *rawStream) {
				for ; seen < len(s.messages); seen++ {
					if closed {
						continue
					}
					// Deltas that queue up join into fewer frames, so the answer may end before
					// the k-th delta frame: then the close follows the answer.
					isDelta := strings.Contains(s.messages[seen], `"answer.delta"`)
					if isDelta {
						deltas++
					}
					if isDelta && deltas == 1+k%7 || strings.Contains(s.messages[seen], `"answer.final"`) {
						closed = true
						_ = raw.sendClose(1000)
					}
				}
			})
		})
	}
	wg.Wait()
	for k, s := range results {
		assert.Empty(t, s.violation, "connection %d", k)
		assert.Equal(t, 1000, s.closeCode, "connection %d", k)
		assert.ErrorIs(t, s.afterEnd, io.EOF, "connection %d", k)
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/citegate/citegate/store"
)

const (
	writeWait = 10 * time.Second
	// closeWait bounds the close frame's write: the connection is going away either way.
	closeWait = time.Second
	// defaultPongWait is how long a connection may stay silent (no frame, no pong) before it is
	// closed; pings go out at half of it, leaving a whole half for the pong to arrive.
	defaultPongWait = 60 * time.Second
	// A client whose queue grows past maxQueuedBytes is too slow to follow its runs and is dropped;
	// the queue itself only holds memory while frames are pending, so idle clients cost little.
	// Each frame is charged frameCost bytes on top of its own (its queue entry, its share of the
	// write), which bounds the number of queued frames too (maxQueuedFrames).
	//
	// The bound is memory, not a number of frames: the load generator's connections were dropped
	// at 64 sessions because a queue of 4,096 small frames was a mere ~0.2 s of backlog for a
	// connection carrying many busy sessions, so a reader that lost the CPU for a moment counted
	// as "too slow". A client that really stopped reading is still dropped: its socket fills, the
	// write pump's write times out (writeWait) or the queue reaches the bound, whichever comes first.
	maxQueuedBytes  = 8 << 20
	frameCost       = 256
	maxQueuedFrames = maxQueuedBytes / frameCost
)

type outFrame struct {
	// data is the encoded frame, shared by every connection the frame goes to. It is nil only for
	// an answer.delta whose text was joined on this connection; that one is encoded when written.
	data []byte
	// delta, when set, is an answer.delta the write pump has not taken yet: later text of the same
	// run joins it instead of becoming a frame of its own (see enqueueDelta).
	delta *pendingDelta
}

// pendingDelta is the text of one or more answer.delta frames of one run. A pendingDelta that
// came with encoded data is shared between connections and never changed; joining text makes a
// copy of the connection's own.
type pendingDelta struct {
	sessionID, runID string
	text             string
	ats              []time.Time // when the oldest text of each joined frame happened, for the latency histogram
}

// encode is the frame exactly as the hub encodes any other (wsFrame's field names and order).
func (d *pendingDelta) encode() ([]byte, error) {
	return json.Marshal(&wsFrame{Type: "answer.delta", SessionID: d.sessionID, RunID: d.runID, Text: d.text})
}

// client is one websocket connection, after gorilla/websocket's chat example: producers (the hub,
// the frame handlers) only append to a bounded queue and never block; the write pump is the one
// goroutine that writes data frames, and the read pump the one that reads. Every byte that reaches
// the socket goes through gorilla's writer, which serialises frames (a control frame written from
// another goroutine never lands inside a data frame) and remembers that the close frame was sent
// (nothing is written after it: later writes fail with websocket.ErrCloseSent).
type client struct {
	s    *Server
	conn *websocket.Conn // nil until the upgrade succeeded
	// batch is conn's socket, which buffers the write pump's frames while it drains the queue
	// (ws_batch.go); nil when the connection was made otherwise (tests).
	batch *batchConn
	user  store.User
	lang  string

	mu        sync.Mutex
	queue     []outFrame
	qBytes    int
	closed    bool   // no more frames are accepted
	closeCode int    // the close frame the write pump sends when done closes
	closeText string // its reason

	notify chan struct{} // capacity 1: "the queue is not empty"
	done   chan struct{} // closed once by close()
	once   sync.Once
}

func newClient(s *Server, u store.User, lang string) *client {
	return &client{s: s, user: u, lang: lang, notify: make(chan struct{}, 1), done: make(chan struct{}),
		closeCode: websocket.CloseGoingAway, closeText: "server closing connection"}
}

// close ends the connection: the write pump sends a close frame (unless one was sent already)
// and closes the socket.
func (c *client) close() { c.once.Do(func() { close(c.done) }) }

// closeWith is close with a specific close frame; the first reason given wins.
func (c *client) closeWith(code int, text string) {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.closeCode, c.closeText = code, text
		c.queue, c.qBytes = nil, 0
	}
	c.mu.Unlock()
	c.close()
}

// enqueue hands a frame to the connection without blocking; a client that cannot keep up is
// dropped. It reports whether the frame was queued.
func (c *client) enqueue(f outFrame) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	return c.pushLocked(f, len(f.data)+frameCost)
}

// enqueueDelta queues an answer.delta frame (d, encoded as data). When the newest frame still
// waiting in the queue is an answer.delta of the same run, the text joins it: the client receives
// the same text in fewer frames (DESIGN §5 promises the text, not one frame per model chunk;
// joined marker-free pieces of the Stripper's output are still marker-free), and a connection that
// falls behind catches up with one write instead of many. It reports whether the text was queued
// and whether it joined a waiting frame (the write pump is then already due to run).
func (c *client) enqueueDelta(d *pendingDelta, data []byte) (queued, joined bool) {
	select {
	case <-c.done:
		return false, false
	default:
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false, false
	}
	if n := len(c.queue); n > 0 {
		if w := c.queue[n-1].delta; w != nil && w.runID == d.runID && w.sessionID == d.sessionID {
			if c.qBytes+len(d.text) > maxQueuedBytes {
				c.mu.Unlock()
				c.dropSlow()
				return false, false
			}
			if c.queue[n-1].data != nil {
				// Shared with other connections: join into a copy of this connection's own.
				w = &pendingDelta{sessionID: w.sessionID, runID: w.runID, text: w.text, ats: slices.Clone(w.ats)}
				c.queue[n-1] = outFrame{delta: w}
			}
			w.text += d.text
			w.ats = append(w.ats, d.ats...)
			c.qBytes += len(d.text)
			c.mu.Unlock()
			return true, true
		}
	}
	return c.pushLocked(outFrame{data: data, delta: d}, len(data)+frameCost), false
}

// dropSlow closes a client whose queue is full.
func (c *client) dropSlow() {
	c.s.m.wsDropped.Inc()
	c.s.log.Warn("websocket client too slow, dropping it", "user", c.user.ID)
	// 1008 (policy violation): the client did not read its frames in time.
	c.closeWith(websocket.ClosePolicyViolation, "client too slow")
}

// pushLocked appends f (charged size bytes) to the queue and wakes the write pump; c.mu is held and
// is released here.
func (c *client) pushLocked(f outFrame, size int) bool {
	if size > maxQueuedBytes && len(c.queue) == 0 {
		// One frame larger than the whole budget (the history of a long session) is not frames
		// piling up behind a slow client: admit it alone, uncharged. A second one while it waits is
		// charged in full, so at most one such frame is held.
		size = 0
	}
	if c.qBytes+size > maxQueuedBytes {
		c.mu.Unlock()
		c.dropSlow()
		return false
	}
	c.queue = append(c.queue, f)
	c.qBytes += size
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return true
}

func (c *client) send(v *wsFrame) {
	data, err := json.Marshal(v)
	if err != nil {
		c.s.log.Error("encode websocket frame", "type", v.Type, "err", err)
		return
	}
	c.enqueue(outFrame{data: data})
}

func (c *client) sendError(code, msg, sessionID, clientMsgID string) {
	c.send(&wsFrame{Type: "error", Code: code, Message: msg, SessionID: sessionID, ClientMsgID: clientMsgID})
}

// writePump is the connection's one data writer. It drains the queue in order, pings every
// pingPeriod (half the pong wait by default), and on close sends the close frame and closes the
// socket.
func (c *client) writePump() {
	period := c.s.pingPeriod
	if period <= 0 {
		period = c.s.pongWait / 2
	}
	ticker := time.NewTicker(period)
	defer func() {
		ticker.Stop()
		_ = c.conn.Close()
	}()
	var batch []outFrame
	for {
		select {
		case <-c.notify:
			c.mu.Lock()
			batch, c.queue = c.queue, batch[:0]
			c.qBytes = 0
			c.mu.Unlock()
			if c.batch != nil {
				c.batch.begin()
			}
			for i, f := range batch {
				select {
				case <-c.done:
					// Closing: the rest of the batch is not worth a blocked write; what was written
					// of it is whole frames and goes out before the close frame.
					clear(batch[i:])
					c.endBatch()
					c.sendClose()
					return
				default:
				}
				data := f.data
				if data == nil && f.delta != nil {
					var err error
					if data, err = f.delta.encode(); err != nil {
						c.s.log.Error("encode websocket frame", "type", "answer.delta", "err", err)
						continue
					}
				}
				_ = c.conn.SetWriteDeadline(time.Now().Add(writeWait))
				if err := c.conn.WriteMessage(websocket.TextMessage, data); err != nil {
					// A failed write (timeout, reset, close already sent) leaves gorilla's writer
					// refusing every further write, so no partial frame is ever followed by bytes.
					c.endBatch()
					c.close()
					return
				}
			}
			if !c.endBatch() {
				c.close()
				return
			}
			// The batch is on the socket now: that is when its deltas count as written.
			now := time.Now()
			for _, f := range batch {
				if f.delta != nil {
					for _, at := range f.delta.ats {
						c.s.m.deltaLatency.Observe(now.Sub(at).Seconds())
					}
				}
			}
			clear(batch)
			if cap(batch) > 256 {
				batch = nil // a burst is over; do not keep its memory on an idle client
			}
		case <-ticker.C:
			if err := c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				c.close()
				return
			}
		case <-c.done:
			c.sendClose()
			return
		}
	}
}

// endBatch writes what the batch buffered; it reports false when that failed (the socket is then
// refusing every write, and the connection is over).
func (c *client) endBatch() bool {
	if c.batch == nil {
		return true
	}
	return c.batch.end() == nil
}

// sendClose writes the close frame; gorilla refuses it (and anything else) when a close frame
// was already sent, e.g. by the read pump answering the client's own close.
func (c *client) sendClose() {
	c.mu.Lock()
	code, text := c.closeCode, c.closeText
	c.mu.Unlock()
	_ = c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(closeWait))
}

// readPump is the connection's one reader. gorilla's default handlers answer pings and close
// frames through its own writer (see client); a pong or any frame extends the read deadline.
func (c *client) readPump(ctx context.Context) {
	c.conn.SetReadLimit(maxFrameBytes)
	_ = c.conn.SetReadDeadline(time.Now().Add(c.s.pongWait))
	c.conn.SetPongHandler(func(string) error { return c.conn.SetReadDeadline(time.Now().Add(c.s.pongWait)) })
	for {
		mt, data, err := c.conn.ReadMessage()
		if err != nil {
			return
		}
		_ = c.conn.SetReadDeadline(time.Now().Add(c.s.pongWait))
		if mt != websocket.TextMessage {
			c.sendError(CodeBadRequest, "frames must be JSON text", "", "")
			continue
		}
		c.handle(ctx, data)
	}
}

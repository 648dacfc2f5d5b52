package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// Batched socket writes (issue 8). gorilla/websocket writes every frame with its own write(2)
// (header and payload in one writev); on a busy server the system calls, not the frames, were a
// third of the CPU. The write pump therefore writes the frames it took from the queue into a
// buffer and hands the buffer to the socket once, when the queue is empty or the buffer holds
// batchFlushBytes. Framing is untouched: gorilla still writes whole frames, one after the other,
// under its own lock; batchConn only delays the bytes, in order, until the end of the batch.
//
// Control frames written by other goroutines during a batch (the read pump's pong, a close frame)
// land in the buffer between two frames, which is where gorilla would have written them anyway,
// and leave with the batch a moment later. Outside a batch every write goes straight through.
const batchFlushBytes = 32 << 10

// batchBufs holds the buffers of batches in progress, so an idle connection holds none.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, batchFlushBytes); return &b }}

// batchConn is the connection's socket as gorilla sees it.
type batchConn struct {
	net.Conn

	mu  sync.Mutex
	on  bool    // a batch is in progress: buffer writes
	buf *[]byte // the batch's buffer (from batchBufs), nil outside a batch
	err error   // the first failed write: every later write fails with it, so no byte ever follows a partial frame
}

// Write buffers p during a batch and writes it through otherwise.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	if !b.on {
		return b.writeLocked(p)
	}
	if b.buf != nil && len(*b.buf)+len(p) > batchFlushBytes {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) >= batchFlushBytes {
		// A large frame is not copied: what was buffered before it went out first.
		return b.writeLocked(p)
	}
	if b.buf == nil {
		b.buf = batchBufs.Get().(*[]byte)
	}
	*b.buf = append(*b.buf, p...)
	return len(p), nil
}

func (b *batchConn) writeLocked(p []byte) (int, error) {
	n, err := b.Conn.Write(p)
	if err != nil {
		b.err = err
	}
	return n, err
}

// flushLocked writes the buffered bytes; the buffer stays for the rest of the batch.
func (b *batchConn) flushLocked() error {
	if b.buf == nil || len(*b.buf) == 0 {
		return nil
	}
	_, err := b.writeLocked(*b.buf)
	*b.buf = (*b.buf)[:0]
	return err
}

// begin starts a batch.
func (b *batchConn) begin() {
	b.mu.Lock()
	b.on = true
	b.mu.Unlock()
}

// end writes what the batch buffered and returns to writing through. The write deadline is the
// one gorilla set for the batch's last frame.
func (b *batchConn) end() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.on = false
	if b.buf == nil {
		return b.err
	}
	err := b.flushLocked()
	if cap(*b.buf) <= 2*batchFlushBytes {
		batchBufs.Put(b.buf)
	}
	b.buf = nil
	if err == nil {
		err = b.err
	}
	return err
}

// batchHijacker hands gorilla's upgrader a batchConn instead of the raw socket.
type batchHijacker struct {
	http.ResponseWriter
	conn *batchConn // set by Hijack
}

// Hijack takes over the connection and wraps it.
func (w *batchHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("websocket hijack: %w", err)
	}
	w.conn = &batchConn{Conn: conn}
	return w.conn, rw, nil
}

// rawConn returns the socket under c's batchConn (tests set its buffer sizes).
func rawConn(c net.Conn) net.Conn {
	if b, ok := c.(*batchConn); ok {
		return b.Conn
	}
	return c
}

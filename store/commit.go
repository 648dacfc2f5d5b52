package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The bbolt write path: one committer goroutine per Store runs every write transaction (batch and
// update both go through it). bbolt has a single writer and each commit ends in two fdatasyncs
// (the changed pages, then the meta page), so commits are serial and the number of writes per
// second is commits per second times writes per commit. The committer makes the second factor
// follow the load:
//
//   - a write that arrives while no commit runs is taken at once (there is no timer, so a lone
//     writer pays one commit and nothing else);
//   - writes that arrive while a commit runs wait in the queue, and the next transaction takes all
//     of them (up to maxGroupCalls calls and maxGroupBytes of announced payload), so under load one
//     fsync pair serves many callers and the group grows with the queue.
//
// bbolt's own DB.Batch, used before, formed groups with a timer (MaxBatchDelay) and let groups queue
// behind the writer lock while another committed: a lone writer always waited the delay, and under
// load most of a turn went to waiting for the lock (docs/benchmarks.md, "Whole gateway under load").
//
// Semantics (what batch's callers rely on, see the "Batch is safe" comments): every fn runs inside
// the transaction; when one returns an error (or panics) the transaction is rolled back and the
// others run again without it in a new one, so a fn may run more than once and only the attempt
// that committed counts; the failing fn is then run alone in its own transaction, so its error is
// computed as if it had been the only writer (as DB.Batch does). A caller returns only after its
// transaction committed and was fsynced, or with its error.

const (
	// maxGroupCalls bounds the calls in one transaction: a longer group would hold the callers
	// already in it for longer than the fsync it saves them.
	maxGroupCalls = 256
	// maxGroupBytes bounds the payload (the sizes callers announce, roughly the bytes they write)
	// of one transaction, so a queue of large tool results commits in several transactions rather
	// than one that dirties a great many pages.
	maxGroupBytes = 4 << 20
)

// errClosed is the error of a write submitted after Close. It wraps bbolt's own error for a closed
// database, which callers got before the committer existed.
var errClosed = fmt.Errorf("store is closed: %w", berrors.ErrDatabaseNotOpen)

// errPanicked marks the error of a fn that panicked; the panic is logged with its stack.
var errPanicked = errors.New("panic in write transaction")

// Call states. A queued call is taken by the committer or withdrawn by its caller (context done),
// whichever swaps the state first; a withdrawn call is never run.
const (
	callQueued int32 = iota
	callTaken
	callWithdrawn
)

// commitCall is one write waiting for (or inside) a group.
type commitCall struct {
	ctx  context.Context
	fn   func(*bolt.Tx) error
	once bool // fn must not run twice (update): it goes last in its group and is never re-run
	size int  // announced payload bytes (0: unknown, counts only towards maxGroupCalls)
	// state is callQueued, callTaken or callWithdrawn.
	state atomic.Int32
	done  chan error // buffered: the committer never blocks on a caller
}

// committer runs a Store's write transactions; see the comment at the top of this file.
type committer struct {
	db  *bolt.DB
	log *slog.Logger

	mu     sync.Mutex
	queue  []*commitCall
	closed bool

	wake   chan struct{} // one-slot doorbell: the queue may have grown
	exited chan struct{} // closed when the loop has returned (after Close drained the queue)

	maxCalls, maxBytes int

	commits atomic.Int64 // transactions committed (a test counts them)
}

func newCommitter(db *bolt.DB, log *slog.Logger) *committer {
	c := &committer{
		db: db, log: log,
		wake:     make(chan struct{}, 1),
		exited:   make(chan struct{}),
		maxCalls: maxGroupCalls, maxBytes: maxGroupBytes,
	}
	go c.loop()
	return c
}

// do runs fn in a write transaction and returns once that transaction committed (nil) or fn's
// error. fn may run more than once unless once is set. If ctx is done while the call still waits
// in the queue, do returns ctx.Err() and fn is never run; once the committer took it, do waits for
// its result.
func (c *committer) do(ctx context.Context, once bool, size int, fn func(*bolt.Tx) error) error {
	call := &commitCall{ctx: ctx, fn: fn, once: once, size: size, done: make(chan error, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	c.queue = append(c.queue, call)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-call.done:
		return err
	case <-ctx.Done():
		if call.state.CompareAndSwap(callQueued, callWithdrawn) {
			return ctx.Err()
		}
		return <-call.done
	}
}

// close refuses new writes, lets the committer finish every write already queued and waits for it
// to return. It may be called more than once.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.exited
}

// pending reports how many calls wait in the queue (tests).
func (c *committer) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, call := range c.queue {
		if call.state.Load() == callQueued {
			n++
		}
	}
	return n
}

func (c *committer) loop() {
	defer close(c.exited)
	for {
		group, closed := c.take()
		if len(group) > 0 {
			c.commit(group)
			continue
		}
		if closed {
			return
		}
		<-c.wake
	}
}

// take removes the next group from the queue: the queued calls in arrival order, up to maxCalls
// calls and maxBytes of announced payload (the first call is always taken), ending after the
// first once call. Calls whose context is done are answered with its error and skipped; calls
// their caller withdrew are dropped. closed reports whether Close was called.
func (c *committer) take() (group []*commitCall, closed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bytes, i := 0, 0
	for ; i < len(c.queue) && len(group) < c.maxCalls; i++ {
		call := c.queue[i]
		if call.state.Load() != callQueued {
			continue // withdrawn by its caller
		}
		if len(group) > 0 && bytes+call.size > c.maxBytes {
			break
		}
		if err := call.ctx.Err(); err != nil {
			if call.state.CompareAndSwap(callQueued, callWithdrawn) {
				call.done <- err
			}
			continue
		}
		if !call.state.CompareAndSwap(callQueued, callTaken) {
			continue
		}
		group = append(group, call)
		bytes += call.size
		if call.once {
			i++
			break
		}
	}
	// Keep the rest in a fresh slice so the taken calls are not retained by the backing array.
	c.queue = append([]*commitCall(nil), c.queue[i:]...)
	return group, c.closed
}

// commit runs one group: all its calls in one transaction; a failing call is taken out and the
// rest retried in a new one, the failing call being answered later from a transaction of its own.
func (c *committer) commit(group []*commitCall) {
	var alone []*commitCall
	for len(group) > 0 {
		failed, failErr := -1, error(nil)
		err := c.update(func(tx *bolt.Tx) error {
			for i, call := range group {
				if err := c.run(call, tx); err != nil {
					failed, failErr = i, err
					return err
				}
			}
			return nil
		})
		if failed < 0 {
			// Committed (err nil), or the commit itself failed: every call gets that.
			for _, call := range group {
				call.done <- err
			}
			break
		}
		call := group[failed]
		group = slices.Delete(group, failed, failed+1)
		switch {
		case failed == 0:
			// Nothing ran before it in this transaction: its error is already its own.
			call.done <- failErr
		case call.once:
			// It must not run again. It was last, so every call before it succeeded and will commit
			// without it (they run again on the same state): its error is the one it would get
			// running alone right after them.
			call.done <- failErr
		default:
			alone = append(alone, call)
		}
	}
	for _, call := range alone {
		call.done <- c.update(func(tx *bolt.Tx) error { return c.run(call, tx) })
	}
}

// update is db.Update that counts commits and turns a panic inside bbolt into an error, so
// nothing kills the committer goroutine.
func (c *committer) update(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("store: panic in a write transaction", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", errPanicked, p)
		}
	}()
	if err := c.db.Update(fn); err != nil {
		return err
	}
	c.commits.Add(1)
	return nil
}

// run calls one fn, turning its panic into its error.
func (c *committer) run(call *commitCall, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("store: panic in a write transaction", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", errPanicked, p)
		}
	}()
	return call.fn(tx)
}

// payloadSize estimates the bytes a write of ms stores (their text fields), for batchSized.
func payloadSize(ms ...Message) int {
	n := 0
	for _, m := range ms {
		n += len(m.Content) + len(m.Metadata) + len(m.ToolCallID) + len(m.ToolName)
		for _, c := range m.ToolCalls {
			n += len(c.ID) + len(c.Name) + len(c.Arguments)
		}
	}
	return n
}

package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// The group committer (commit.go) on real bbolt files. No verdict here depends on timing: groups are
// made deterministic by holding the committer inside a transaction until the writes under test are
// queued, and the bounds below only stop a hang.

const hangBound = 30 * time.Second

var bucketTest = []byte("commit_test")

// put returns a batch fn that writes key=val into the test bucket.
func put(key, val string) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketTest)
		if err != nil {
			return err
		}
		return b.Put([]byte(key), []byte(val))
	}
}

func testValue(t *testing.T, s *Store, key string) string {
	t.Helper()
	var out string
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketTest); b != nil {
			out = string(b.Get([]byte(key)))
		}
		return nil
	}))
	return out
}

// hold occupies the committer with a transaction that waits until release is called, so that
// writes submitted meanwhile queue up and form the next group.
func hold(t *testing.T, s *Store) (release func(), done <-chan error) {
	t.Helper()
	started, gate, errc := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		errc <- s.batch(context.Background(), "hold", func(tx *bolt.Tx) error {
			once.Do(func() { close(started) })
			<-gate
			return nil
		})
	}()
	select {
	case <-started:
	case <-time.After(hangBound):
		t.Fatal("the holding transaction never started")
	}
	return sync.OnceFunc(func() { close(gate) }), errc
}

// waitPending waits until n calls wait in the committer's queue.
func waitPending(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for s.commit.pending() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", s.commit.pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCommitterSharesCommits: writes that arrive while a commit runs share the next transaction
// (one commit for all of them), and a lone writer gets a commit of its own for every write, with no
// one to wait for.
func TestCommitterSharesCommits(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	sess := newSession(t, s, "u1")

	t.Run("concurrent writers share one commit", func(t *testing.T) {
		const writers = 24
		before := s.commit.commits.Load()
		release, held := hold(t, s)
		var wg sync.WaitGroup
		ids := make([]uint64, writers)
		errs := make([]error, writers)
		for i := range writers {
			wg.Go(func() {
				m, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: fmt.Sprintf("q%d", i)})
				ids[i], errs[i] = m.ID, err
			})
		}
		waitPending(t, s, writers)
		release()
		wg.Wait()
		require.NoError(t, <-held)
		for _, err := range errs {
			require.NoError(t, err)
		}
		assert.Equal(t, int64(2), s.commit.commits.Load()-before, "the held transaction, then one for all %d writers", writers)
		msgs, err := s.ListMessages(ctx, sess.ID)
		require.NoError(t, err)
		require.Len(t, msgs, writers)
		seen := map[uint64]bool{}
		for _, id := range ids {
			assert.False(t, seen[id], "id %d returned twice", id)
			seen[id] = true
		}
	})

	t.Run("a lone writer commits each write at once", func(t *testing.T) {
		const writes = 40
		before := s.commit.commits.Load()
		for i := range writes {
			_, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: fmt.Sprintf("alone %d", i)})
			require.NoError(t, err)
			// Nothing is left waiting behind a returned write: no group is being collected.
			assert.Zero(t, s.commit.pending())
		}
		assert.Equal(t, int64(writes), s.commit.commits.Load()-before, "one commit per write, none shared, none extra")
	})

	t.Run("groups are bounded by count and by bytes", func(t *testing.T) {
		setBounds := func(calls, bytes int) {
			s.commit.mu.Lock() // take reads them under mu
			s.commit.maxCalls, s.commit.maxBytes = calls, bytes
			s.commit.mu.Unlock()
		}
		setBounds(4, 100)
		defer setBounds(maxGroupCalls, maxGroupBytes)
		for _, tc := range []struct {
			name    string
			n, size int
			commits int64
		}{
			{"count", 10, 0, 3},       // 4 + 4 + 2
			{"bytes", 6, 60, 6},       // 60 + 60 > 100: one each
			{"small bytes", 8, 20, 2}, // 4 × 20 ≤ 100: count bound first
		} {
			before := s.commit.commits.Load()
			release, held := hold(t, s)
			var wg sync.WaitGroup
			for i := range tc.n {
				wg.Go(func() {
					assert.NoError(t, s.batchSized(ctx, "put", tc.size, put(fmt.Sprintf("%s-%d", tc.name, i), "v")))
				})
			}
			waitPending(t, s, tc.n)
			release()
			wg.Wait()
			require.NoError(t, <-held)
			assert.Equal(t, 1+tc.commits, s.commit.commits.Load()-before, tc.name)
			for i := range tc.n {
				assert.Equal(t, "v", testValue(t, s, fmt.Sprintf("%s-%d", tc.name, i)))
			}
		}
	})
	checkConsistency(t, s)
}

// submit runs one s.batch (or s.update) in a goroutine and returns its result channel.
func submit(s *Store, once bool, fn func(*bolt.Tx) error) <-chan error {
	errc := make(chan error, 1)
	go func() {
		if once {
			errc <- s.update(context.Background(), "test", fn)
		} else {
			errc <- s.batch(context.Background(), "test", fn)
		}
	}()
	return errc
}

// TestCommitterErrorIsolation: a failing write is taken out of its group, the others commit
// without it (their captured results from the attempt that committed), and it gets its own error
// from a transaction of its own.
func TestCommitterErrorIsolation(t *testing.T) {
	s, _ := openTest(t)
	errBoom := errors.New("boom")

	// a counts its runs and captures what it wrote; b always fails after writing; c fails only the
	// first time (its run alone succeeds); all three are queued behind a held transaction so they
	// form one group in this order.
	var aRuns, bRuns, cRuns atomic.Int32
	var aSaw string
	release, held := hold(t, s)
	aErr := submit(s, false, func(tx *bolt.Tx) error {
		aRuns.Add(1)
		b, err := tx.CreateBucketIfNotExists(bucketTest)
		if err != nil {
			return err
		}
		// Incrementing a counter: a rolled-back attempt must not leave its increment behind.
		n := len(b.Get([]byte("a")))
		v := strings.Repeat("x", n+1)
		aSaw = v
		return b.Put([]byte("a"), []byte(v))
	})
	waitPending(t, s, 1)
	bErr := submit(s, false, func(tx *bolt.Tx) error {
		bRuns.Add(1)
		if err := put("b", "written before failing")(tx); err != nil {
			return err
		}
		return errBoom
	})
	waitPending(t, s, 2)
	cErr := submit(s, false, func(tx *bolt.Tx) error {
		if cRuns.Add(1) == 1 {
			return errBoom
		}
		return put("c", "alone")(tx)
	})
	waitPending(t, s, 3)
	before := s.commit.commits.Load()
	release()
	require.NoError(t, <-held)

	require.NoError(t, <-aErr)
	assert.ErrorIs(t, <-bErr, errBoom, "b gets its own error")
	require.NoError(t, <-cErr, "c's error came from the group; alone it succeeds")
	assert.Equal(t, "x", testValue(t, s, "a"), "a's rolled-back attempts left nothing")
	assert.Equal(t, "x", aSaw, "a's captured result is from the attempt that committed")
	assert.Empty(t, testValue(t, s, "b"), "b's partial write was rolled back")
	assert.Equal(t, "alone", testValue(t, s, "c"))
	// a: [a b c] fails at b, [a c] fails at c, [a] commits. b and c then run alone.
	assert.Equal(t, int32(3), aRuns.Load())
	assert.Equal(t, int32(2), bRuns.Load(), "b ran in the group and once alone")
	assert.Equal(t, int32(2), cRuns.Load())
	assert.Equal(t, int64(2), s.commit.commits.Load()-before-1, "the group's commit and c's own (b's rolled back)")

	t.Run("first in its group fails once", func(t *testing.T) {
		var runs atomic.Int32
		err := s.batch(context.Background(), "test", func(tx *bolt.Tx) error {
			runs.Add(1)
			return errBoom
		})
		assert.ErrorIs(t, err, errBoom)
		assert.Equal(t, int32(1), runs.Load(), "nothing ran before it: its error is already its own")
	})

	t.Run("update runs once even when it fails in a group", func(t *testing.T) {
		var uRuns atomic.Int32
		release, held := hold(t, s)
		xErr := submit(s, false, put("x", "1"))
		waitPending(t, s, 1)
		uErr := submit(s, true, func(tx *bolt.Tx) error {
			uRuns.Add(1)
			if err := put("u", "1")(tx); err != nil {
				return err
			}
			return errBoom
		})
		waitPending(t, s, 2)
		yErr := submit(s, false, put("y", "1"))
		waitPending(t, s, 3)
		release()
		require.NoError(t, <-held)
		require.NoError(t, <-xErr)
		assert.ErrorIs(t, <-uErr, errBoom)
		require.NoError(t, <-yErr)
		assert.Equal(t, int32(1), uRuns.Load(), "an update fn never runs twice")
		assert.Equal(t, "1", testValue(t, s, "x"))
		assert.Empty(t, testValue(t, s, "u"))
		assert.Equal(t, "1", testValue(t, s, "y"), "the write queued after the update went into the next group")
	})
	checkConsistency(t, s)
}

// TestCommitterPanicIsolation: a panicking fn becomes its caller's error; the other writes of its
// group commit and the committer goes on serving.
func TestCommitterPanicIsolation(t *testing.T) {
	s, _ := openTest(t)
	release, held := hold(t, s)
	aErr := submit(s, false, put("a", "1"))
	waitPending(t, s, 1)
	pErr := submit(s, false, func(tx *bolt.Tx) error {
		_ = put("p", "1")(tx)
		var m map[string]int
		m["nil map"]++ // panics
		return nil
	})
	waitPending(t, s, 2)
	cErr := submit(s, false, put("c", "1"))
	waitPending(t, s, 3)
	release()
	require.NoError(t, <-held)
	require.NoError(t, <-aErr)
	err := <-pErr
	require.ErrorIs(t, err, errPanicked)
	assert.Contains(t, err.Error(), "nil map")
	require.NoError(t, <-cErr)
	assert.Empty(t, testValue(t, s, "p"))

	// A panic alone, in an update, and a panic value that is an error.
	require.ErrorIs(t, s.update(context.Background(), "test", func(*bolt.Tx) error { panic(errors.New("own")) }), errPanicked)
	require.ErrorIs(t, s.batch(context.Background(), "test", func(*bolt.Tx) error { panic("alone") }), errPanicked)

	// Still serving.
	require.NoError(t, s.batch(context.Background(), "test", put("after", "1")))
	assert.Equal(t, "1", testValue(t, s, "after"))
	checkConsistency(t, s)
}

// TestCommitterContextCancelWhileQueued: a caller whose context ends while its write waits gets
// ctx.Err() and the write is never applied; a context already done when the committer reaches the
// call is answered the same way.
func TestCommitterContextCancelWhileQueued(t *testing.T) {
	s, _ := openTest(t)
	sess := newSession(t, s, "u1")
	release, held := hold(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	errc := make(chan error, 1)
	go func() {
		errc <- s.batch(ctx, "cancelled", func(tx *bolt.Tx) error {
			ran.Store(true)
			return put("cancelled", "1")(tx)
		})
	}()
	// The same through a public method.
	msgErr := make(chan error, 1)
	go func() {
		_, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: "never"})
		msgErr <- err
	}()
	okErr := submit(s, false, put("kept", "1"))
	waitPending(t, s, 3)
	cancel()
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(hangBound):
		t.Fatal("a cancelled caller waited for the commit it left")
	}
	assert.ErrorIs(t, <-msgErr, context.Canceled)
	release()
	require.NoError(t, <-held)
	require.NoError(t, <-okErr)
	assert.False(t, ran.Load(), "the withdrawn fn never ran")
	assert.Empty(t, testValue(t, s, "cancelled"))
	assert.Equal(t, "1", testValue(t, s, "kept"))
	msgs, err := s.ListMessages(context.Background(), sess.ID)
	require.NoError(t, err)
	assert.Empty(t, msgs)

	// Context done before the committer takes the call, with its caller not yet looking: the
	// committer answers ctx.Err() itself and skips the fn.
	var ran2 atomic.Bool
	cctx, ccancel := context.WithCancel(context.Background())
	release, held = hold(t, s)
	call := &commitCall{ctx: cctx, fn: func(*bolt.Tx) error { ran2.Store(true); return nil }, done: make(chan error, 1)}
	s.commit.mu.Lock()
	s.commit.queue = append(s.commit.queue, call)
	s.commit.mu.Unlock()
	ccancel()
	release()
	require.NoError(t, <-held)
	select {
	case err := <-call.done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(hangBound):
		t.Fatal("the committer never answered the cancelled call")
	}
	assert.False(t, ran2.Load())
}

// TestCommitterClose: Close commits every write already queued, refuses writes submitted after it,
// and leaves no committer goroutine behind; the queued writes are on disk after a reopen.
func TestCommitterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "citegate.db")
	s, err := Open(path, Options{Logger: quietLogger()})
	require.NoError(t, err)
	sess := newSession(t, s, "u1")
	ctx := context.Background()

	release, held := hold(t, s)
	const queued = 8
	var wg sync.WaitGroup
	for i := range queued {
		wg.Go(func() {
			_, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: fmt.Sprintf("q%d", i)})
			assert.NoError(t, err, "a write queued before Close commits")
		})
	}
	waitPending(t, s, queued)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	deadline := time.Now().Add(hangBound)
	for {
		s.commit.mu.Lock()
		c := s.commit.closed
		s.commit.mu.Unlock()
		if c {
			break
		}
		require.True(t, time.Now().Before(deadline), "Close never started")
		time.Sleep(time.Millisecond)
	}
	_, err = s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: "late"})
	require.Error(t, err, "a write after Close is refused")
	assert.ErrorIs(t, err, bolt.ErrDatabaseNotOpen)
	release()
	require.NoError(t, <-held)
	wg.Wait()
	require.NoError(t, <-closed)
	select {
	case <-s.commit.exited:
	default:
		t.Fatal("the committer goroutine is still running after Close")
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	assert.NotContains(t, stacks, "(*committer).do", "no caller is left waiting")
	require.NoError(t, s.Close(), "a second Close is harmless")

	s2 := openAt(t, path, nil)
	msgs, err := s2.ListMessages(ctx, sess.ID)
	require.NoError(t, err)
	assert.Len(t, msgs, queued)
	checkConsistency(t, s2)
}

// TestCommitterConcurrentMixedOutcomes: many writers, some of whose writes fail or panic after
// writing; every successful write is stored and no failed one left anything, with -race watching
// the captured results.
func TestCommitterConcurrentMixedOutcomes(t *testing.T) {
	s, _ := openTest(t)
	const writers, each = 16, 40
	outcome := func(g, i int) string {
		switch (g*each + i) % 11 {
		case 3:
			return "error"
		case 7:
			return "panic"
		}
		return "ok"
	}
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("%02d-%03d", g, i)
				var captured string
				err := s.batch(context.Background(), "mixed", func(tx *bolt.Tx) error {
					captured = ""
					if err := put(key, key)(tx); err != nil {
						return err
					}
					switch outcome(g, i) {
					case "error":
						return errors.New("refused " + key)
					case "panic":
						panic("panic " + key)
					}
					captured = key
					return nil
				})
				switch outcome(g, i) {
				case "ok":
					assert.NoError(t, err)
					assert.Equal(t, key, captured)
				case "error":
					assert.ErrorContains(t, err, "refused "+key)
				case "panic":
					assert.ErrorIs(t, err, errPanicked)
				}
			}
		})
	}
	wg.Wait()
	for g := range writers {
		for i := range each {
			key := fmt.Sprintf("%02d-%03d", g, i)
			if outcome(g, i) == "ok" {
				assert.Equal(t, key, testValue(t, s, key))
			} else {
				assert.Empty(t, testValue(t, s, key), key)
			}
		}
	}
	checkConsistency(t, s)
}

package store

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// fakeClock is an injectable clock the tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openAt opens a store at path with the given clock, closing it (and checking consistency) when
// the test ends unless the test closed it first.
func openAt(t testing.TB, path string, clock *fakeClock) *Store {
	t.Helper()
	opt := Options{Logger: quietLogger()}
	if clock != nil {
		opt.Now = clock.Now
	}
	s, err := Open(path, opt)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openTest opens a fresh store in a temporary directory.
func openTest(t testing.TB) (*Store, *fakeClock) {
	t.Helper()
	clock := newClock()
	return openAt(t, filepath.Join(t.TempDir(), "citegate.db"), clock), clock
}

// checkConsistency runs bbolt's page-level consistency check.
func checkConsistency(t testing.TB, s *Store) {
	t.Helper()
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("bbolt check: %v", err)
		}
		return nil
	}))
}

// rawPut writes bytes directly into a bucket, bypassing validation, to simulate corrupt records.
func rawPut(t testing.TB, s *Store, bucket, key, value []byte) {
	t.Helper()
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put(key, value)
	}))
}

// rawGet reads the stored bytes of one key.
func rawGet(t testing.TB, s *Store, bucket, key []byte) []byte {
	t.Helper()
	var out []byte
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucket).Get(key); v != nil {
			out = append([]byte(nil), v...)
		}
		return nil
	}))
	return out
}

func newSession(t testing.TB, s *Store, userID string) Session {
	t.Helper()
	sess, err := s.CreateSession(context.Background(), Session{UserID: userID, Channel: "desktop"})
	require.NoError(t, err)
	return sess
}

package store

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func TestOpenCreatesDirectoryAndFileOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "nested")
	path := filepath.Join(dir, "citegate.db")
	s := openAt(t, path, nil)
	assert.Equal(t, path, s.Path())
	require.NoError(t, s.Ping(context.Background()))

	di, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestOpenRejectsEmptyPath(t *testing.T) {
	_, err := Open("", Options{})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestOpenLockedFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "citegate.db")
	first := openAt(t, path, nil)
	require.NoError(t, first.Ping(context.Background()))

	tests := []struct {
		name    string
		timeout time.Duration
		want    time.Duration // the effective timeout
	}{
		{"explicit 100ms", 100 * time.Millisecond, 100 * time.Millisecond},
		{"explicit 300ms", 300 * time.Millisecond, 300 * time.Millisecond},
		{"default", 0, defaultTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			s, err := Open(path, Options{Timeout: tt.timeout, Logger: quietLogger()})
			elapsed := time.Since(start)
			if s != nil {
				_ = s.Close()
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrLocked)
			assert.Contains(t, err.Error(), path, "the error names the file")
			assert.Contains(t, err.Error(), "citegate serve", "the error says what to do")
			// bbolt polls the lock every 50ms and gives up one poll before the deadline.
			assert.GreaterOrEqual(t, elapsed, tt.want-100*time.Millisecond, "waited for the lock")
			assert.Less(t, elapsed, tt.want+10*time.Second, "did not hang (a generous bound: only a hang fails it)")
			t.Logf("locked open failed after %s (timeout %s)", elapsed, tt.want)
		})
	}

	// Once the holder closes, the file opens again.
	require.NoError(t, first.Close())
	second, err := Open(path, Options{Timeout: 100 * time.Millisecond, Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, second.Close())
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "citegate.db")
	s := openAt(t, path, nil)
	assert.Equal(t, []byte(strconv.Itoa(schemaVersion)), rawGet(t, s, bucketMeta, keySchemaVersion))
	rawPut(t, s, bucketMeta, keySchemaVersion, []byte("99"))
	require.NoError(t, s.Close())

	_, err := Open(path, Options{Timeout: 100 * time.Millisecond, Logger: quietLogger()})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), "schema version 99 is newer")

	// The refused open wrote nothing: the newer version is still there.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, []byte("99"), tx.Bucket(bucketMeta).Get(keySchemaVersion))
		return nil
	}))
}

func TestOpenRejectsNonDatabaseFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "citegate.db")
	require.NoError(t, os.WriteFile(path, []byte("this is not a bbolt file, it is long enough to be read as a page header......"), 0o600))
	_, err := Open(path, Options{Timeout: 100 * time.Millisecond, Logger: quietLogger()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
}

func TestRecoverySkipsCorruptRunRecord(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "citegate.db")
	s := openAt(t, path, nil)
	sess := newSession(t, s, "u1")
	bad, err := s.CreateRun(ctx, Run{SessionID: sess.ID})
	require.NoError(t, err)
	good, err := s.CreateRun(ctx, Run{SessionID: sess.ID})
	require.NoError(t, err)
	rawPut(t, s, bucketRuns, []byte(bad.ID), []byte("{not json"))
	require.NoError(t, s.Close())

	s = openAt(t, path, nil)
	assert.Equal(t, 1, s.RecoveredRuns())
	r, err := s.GetRun(ctx, good.ID)
	require.NoError(t, err)
	assert.Equal(t, PhaseFailed, r.Phase)
	_, err = s.GetRun(ctx, bad.ID)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotFound)
	assert.Equal(t, []byte("{not json"), rawGet(t, s, bucketRuns, []byte(bad.ID)), "corrupt record kept as is")
}

func TestCorruptRecordsGiveErrorsNotPanics(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	sess := newSession(t, s, "u1")
	rawPut(t, s, bucketSessions, []byte("bad"), []byte("\x00\x01garbage"))
	rawPut(t, s, bucketMessages, u64(999), []byte(`{"id":"not a number"}`))
	rawPut(t, s, bucketUsers, []byte("baduser"), []byte(`[`))
	rawPut(t, s, bucketSessionMessages, prefixKey(sess.ID, []byte{1, 2}), nil)

	_, err := s.GetSession(ctx, "bad")
	assert.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotFound)
	_, err = s.GetMessage(ctx, 999)
	assert.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotFound)
	err = s.MergeMetadata(ctx, 999, map[string]json.RawMessage{"a": json.RawMessage(`1`)})
	assert.Error(t, err)
	_, err = s.GetUser(ctx, "baduser")
	assert.Error(t, err)
	_, err = s.ListMessages(ctx, sess.ID)
	assert.ErrorContains(t, err, "corrupt message index key")
	_, err = s.LastMessageID(ctx, sess.ID)
	assert.ErrorContains(t, err, "corrupt message index key")
	err = s.SetSessionTitle(ctx, "bad", "t")
	assert.Error(t, err)
	assert.Equal(t, []byte("\x00\x01garbage"), rawGet(t, s, bucketSessions, []byte("bad")), "nothing overwritten")
}

// holderEnv makes the test binary act as another process holding the database (see
// TestHelperHoldDatabase).
const holderEnv = "CITEGATE_STORE_TEST_HOLD"

// TestHelperHoldDatabase is not a test on its own: run as a child process it opens the database
// named in holderEnv, says "ready" and holds the file until its stdin closes.
func TestHelperHoldDatabase(t *testing.T) {
	path := os.Getenv(holderEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	s, err := Open(path, Options{Logger: quietLogger()})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = s.Close()
	os.Exit(0)
}

func TestOpenLockedByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "citegate.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldDatabase$")
	cmd.Env = append(os.Environ(), holderEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)

	start := time.Now()
	_, err = Open(path, Options{Timeout: 200 * time.Millisecond, Logger: quietLogger()})
	elapsed := time.Since(start)
	require.ErrorIs(t, err, ErrLocked)
	assert.Less(t, elapsed, 10*time.Second, "did not hang (a generous bound: only a hang fails it)")
	t.Logf("open against another process failed after %s: %v", elapsed, err)

	// When the other process exits, the file opens.
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	s, err := Open(path, Options{Timeout: 200 * time.Millisecond, Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

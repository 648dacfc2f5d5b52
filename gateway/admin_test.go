package gateway

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func startAdmin(t *testing.T, e *testEnv) (cancel func(), done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- e.srv.ServeAdmin(ctx) }()
	path := filepath.Join(e.srv.cfg.DataDir, AdminSocketName)
	require.Eventually(t, func() bool {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	return cancel, done
}

func TestAdminSocket(t *testing.T) {
	e := newEnv(t)
	dir := e.srv.cfg.DataDir
	path := filepath.Join(dir, AdminSocketName)
	ctx := context.Background()

	_, err := AdminAddUser(ctx, dir, "alice")
	require.ErrorIs(t, err, ErrNoAdminServer, "no server yet")
	assert.Contains(t, err.Error(), path)

	cancel, done := startAdmin(t, e)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "owner-only socket")

	tok, err := AdminAddUser(ctx, dir, "alice")
	require.NoError(t, err)
	u, err := e.st.UserByToken(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, "alice", u.Name)
	status, _, _ := e.do("GET", "/api/me", tok, nil)
	assert.Equal(t, 200, status, "the new token works at once")

	_, err = AdminAddUser(ctx, dir, "ALICE")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "already taken")
	_, err = AdminAddUser(ctx, dir, "  ")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "empty")

	// A second server on the same data directory is refused, the first keeps serving.
	err = e.srv.ServeAdmin(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "another citegate server")
	_, err = AdminAddUser(ctx, dir, "bob")
	require.NoError(t, err)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("ServeAdmin did not return")
	}
	_, err = os.Stat(path)
	assert.True(t, errors.Is(err, os.ErrNotExist), "socket removed on exit")
	_, err = AdminAddUser(ctx, dir, "carol")
	require.ErrorIs(t, err, ErrNoAdminServer)
}

func TestAdminSocketStaleFile(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.srv.cfg.DataDir, AdminSocketName)
	// A crashed server leaves its socket file behind.
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	_, err = os.Stat(path)
	require.NoError(t, err)

	_, err = AdminAddUser(context.Background(), e.srv.cfg.DataDir, "x")
	require.ErrorIs(t, err, ErrNoAdminServer, "a dead socket is no server")

	cancel, done := startAdmin(t, e)
	defer func() { cancel(); <-done }()
	tok, err := AdminAddUser(context.Background(), e.srv.cfg.DataDir, "alice")
	require.NoError(t, err)
	assert.NotEmpty(t, tok)
}

func TestAdminSocketRefusesNonSocket(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.srv.cfg.DataDir, AdminSocketName)
	require.NoError(t, os.WriteFile(path, []byte("precious"), 0o600))
	err := e.srv.ServeAdmin(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a socket")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "precious", string(b), "nothing is lost")
}

package gateway

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
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

// TestAdminUserCommands drives list, rotate, revoke and login through the socket, with an open
// websocket that must close when its user's token is rotated.
func TestAdminUserCommands(t *testing.T) {
	e := newEnv(t)
	dir := e.srv.cfg.DataDir
	ctx := context.Background()
	cancel, done := startAdmin(t, e)
	defer func() { cancel(); <-done }()

	alice, oldTok := e.user("alice")
	_, bobTok := e.user("bob")
	aliceWS := e.mustWS(oldTok)
	bobWS := e.mustWS(bobTok)
	// The connections are registered once they answer a frame.
	aliceWS.send(map[string]any{"type": "session.open", "sessionId": "x"})
	aliceWS.until("error")
	bobWS.send(map[string]any{"type": "session.open", "sessionId": "x"})
	bobWS.until("error")

	users, err := AdminListUsers(ctx, dir)
	require.NoError(t, err)
	require.Len(t, users, 2)
	assert.Equal(t, "alice", users[0].Name)
	assert.True(t, users[0].Active)

	rot, err := AdminRotateToken(ctx, dir, "Alice")
	require.NoError(t, err)
	assert.Equal(t, alice.ID, rot.ID)
	status, _, _ := e.do("GET", "/api/me", oldTok, nil)
	assert.Equal(t, 401, status, "the old token stops working at once")
	status, _, _ = e.do("GET", "/api/me", rot.Token, nil)
	assert.Equal(t, 200, status)
	aliceWS.waitClosed(t, 10*time.Second)
	bobWS.send(map[string]any{"type": "session.open", "sessionId": "x"})
	assert.Equal(t, "error", bobWS.next()["type"], "other users' connections stay up")

	link, err := AdminLoginLink(ctx, dir, "alice")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(link.URL, e.srv.cfg.PublicURL+"/login?code="), link.URL)
	assert.False(t, link.ExpiresAt.IsZero())

	newWS := e.mustWS(rot.Token)
	newWS.send(map[string]any{"type": "session.open", "sessionId": "x"})
	newWS.until("error")
	_, err = AdminRevokeUser(ctx, dir, "alice")
	require.NoError(t, err)
	newWS.waitClosed(t, 10*time.Second)
	status, _, _ = e.do("GET", "/api/me", rot.Token, nil)
	assert.Equal(t, 401, status)
	_, err = AdminLoginLink(ctx, dir, "alice")
	require.ErrorIs(t, err, store.ErrRevoked)
	users, err = AdminListUsers(ctx, dir)
	require.NoError(t, err)
	assert.False(t, users[0].Active)

	_, err = AdminRotateToken(ctx, dir, "carol")
	require.ErrorIs(t, err, store.ErrNotFound)
	assert.Equal(t, `no user named "carol"`, err.Error())
	_, err = AdminAddUser(ctx, dir, "BOB")
	require.ErrorIs(t, err, store.ErrConflict)
	assert.Equal(t, `user name "BOB" is already taken`, err.Error())
}

// TestAdminBackup copies the database through the socket while it is in use and opens the copy.
func TestAdminBackup(t *testing.T) {
	e := newEnv(t)
	cancel, done := startAdmin(t, e)
	defer func() { cancel(); <-done }()
	u, _ := e.user("alice")
	s := e.session(u, "kept")
	var buf bytes.Buffer
	n, err := AdminBackup(context.Background(), e.srv.cfg.DataDir, &buf)
	require.NoError(t, err)
	assert.Equal(t, int64(buf.Len()), n)
	path := filepath.Join(t.TempDir(), "copy.db")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	cp, err := store.Open(path, store.Options{})
	require.NoError(t, err)
	defer cp.Close()
	got, err := cp.GetSession(context.Background(), s.ID)
	require.NoError(t, err)
	assert.Equal(t, "kept", got.Title)
}

// TestAdminSocketOperatorRole changes the role through the admin socket: the answer says whether
// anything changed, the change is audited as the command line that asked (a malformed actor is
// recorded as the socket), and errors map to the store's.
func TestAdminSocketOperatorRole(t *testing.T) {
	e := newEnv(t)
	dir := e.srv.cfg.DataDir
	ctx := context.Background()
	cancel, done := startAdmin(t, e)
	defer func() { cancel(); <-done }()

	u, err := AdminAddUserRole(ctx, dir, "olga", true, "cli:root")
	require.NoError(t, err)
	assert.True(t, u.Operator)
	assert.NotEmpty(t, u.Token)
	_, err = AdminAddUserRole(ctx, dir, "alice", false, "cli:root")
	require.NoError(t, err)

	r, err := AdminSetOperator(ctx, dir, "alice", true, "cli:ops\nforged")
	require.NoError(t, err)
	assert.True(t, r.Changed)
	assert.True(t, r.Operator)
	assert.Equal(t, e.srv.cfg.PublicURL+"/operator", r.ConsoleURL)
	r, err = AdminSetOperator(ctx, dir, "alice", true, "cli:root")
	require.NoError(t, err)
	assert.False(t, r.Changed)
	_, err = AdminSetOperator(ctx, dir, "nobody", true, "cli:root")
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = AdminSetOperator(ctx, dir, " ", true, "cli:root")
	assert.ErrorIs(t, err, store.ErrInvalid)

	users, err := AdminListUsers(ctx, dir)
	require.NoError(t, err)
	roles := map[string]bool{}
	for _, u := range users {
		roles[u.Name] = u.Operator
	}
	assert.Equal(t, map[string]bool{"olga": true, "alice": true}, roles)

	log, err := e.st.AuditSince(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, log, 2)
	assert.Equal(t, []string{"olga", "alice"}, []string{log[0].Target, log[1].Target})
	assert.Equal(t, "cli:root", log[0].Actor)
	assert.Equal(t, "cli:admin-socket", log[1].Actor, "a malformed actor is recorded as the socket, not as given")
}

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// roleAuditOf reads the role changes of the audit log in data (oldest first) with the store closed
// by everyone else.
func roleAuditOf(t *testing.T, data string) []store.AuditEntry {
	t.Helper()
	st, err := store.Open(filepath.Join(data, "citegate.db"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	all, err := st.AuditSince(context.Background(), 0, 1000)
	require.NoError(t, err)
	return all
}

// TestCLIOperatorRoleOffline drives the role commands against the database file directly: the role
// shows in `user list`, no-op changes say so, and every change lands in the audit log as the CLI.
func TestCLIOperatorRoleOffline(t *testing.T) {
	data := t.TempDir()
	env := cliEnv(t, "CITEGATE_DATA="+data, "USER=tester")

	r := runBinary(t, env, "user", "add", "--operator", "olga")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^[A-Za-z0-9_-]{43}\n$`, r.stdout, "stdout holds the token alone")
	assert.Contains(t, r.stderr, "olga is an operator")
	r = runBinary(t, env, "user", "add", "alice", "--operator=false")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "operator")

	r = runBinary(t, env, "user", "list")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^NAME +STATE +ROLE +BROWSER SESSIONS`, r.stdout)
	assert.Regexp(t, `(?m)^olga +active +operator `, r.stdout)
	assert.Regexp(t, `(?m)^alice +active +user `, r.stdout)

	r = runBinary(t, env, "user", "grant-operator", "ALICE")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "alice is now an operator")
	assert.Contains(t, r.stdout, "http://127.0.0.1:8080/operator")
	r = runBinary(t, env, "user", "grant-operator", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "alice is already an operator; nothing changed")
	r = runBinary(t, env, "user", "list")
	assert.Regexp(t, `(?m)^alice +active +operator `, r.stdout)

	r = runBinary(t, env, "user", "revoke-operator", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "alice is no longer an operator")
	r = runBinary(t, env, "user", "revoke-operator", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "alice is not an operator; nothing changed")

	r = runBinary(t, env, "user", "grant-operator", "nobody")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `there is no user named "nobody" (see: citegate user list)`)
	r = runBinary(t, env, "user", "grant-operator")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "exactly one NAME is required")
	r = runBinary(t, env, "user", "token", "--operator", "alice")
	assert.Equal(t, 2, r.code, "--operator belongs to user add only")

	log := roleAuditOf(t, data)
	require.Len(t, log, 3, "creation as operator, grant, revoke; the no-ops are not recorded")
	for i, want := range []struct{ action, target string }{
		{store.AuditOperatorGrant, "olga"}, {store.AuditOperatorGrant, "alice"}, {store.AuditOperatorRevoke, "alice"},
	} {
		assert.Equal(t, want.action, log[i].Action, "entry %d", i)
		assert.Equal(t, want.target, log[i].Target, "entry %d", i)
		assert.True(t, strings.HasPrefix(log[i].Actor, "cli:"), "the command line is the actor: %q", log[i].Actor)
		assert.Empty(t, log[i].ActorID)
	}
}

// TestCLIOperatorRoleWhileServing changes the role through a running server's admin socket; the
// change is audited by the server and shows in `user list` at once.
func TestCLIOperatorRoleWhileServing(t *testing.T) {
	data := t.TempDir()
	env := cliEnv(t, "CITEGATE_DATA="+data, "CITEGATE_LOG_LEVEL=warn", "USER=tester")
	srv := startServe(t, env, "--addr", cliFreeAddr(t))

	r := runBinary(t, env, "user", "add", "olga", "--operator")
	require.Equal(t, 0, r.code, r.stderr)
	olgaTok := strings.TrimSpace(r.stdout)
	assert.Contains(t, r.stderr, "olga is an operator")
	r = runBinary(t, env, "user", "add", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	aliceTok := strings.TrimSpace(r.stdout)

	r = runBinary(t, env, "user", "grant-operator", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "alice is now an operator")
	assert.Contains(t, r.stdout, srv.base+"/operator")
	r = runBinary(t, env, "user", "grant-operator", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "already an operator")
	r = runBinary(t, env, "user", "list")
	assert.Regexp(t, `(?m)^alice +active +operator `, r.stdout)
	assert.Regexp(t, `(?m)^olga +active +operator `, r.stdout)
	assert.Regexp(t, `(?m)^local +active +user `, r.stdout)
	r = runBinary(t, env, "user", "revoke-operator", "olga")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "olga is no longer an operator")
	r = runBinary(t, env, "user", "revoke-operator", "nobody")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `there is no user named "nobody"`)

	// The server reads the role with every request: the console answers the operator at once.
	assert.Equal(t, 200, apiStatus(t, srv.base, aliceTok, "/operator"))
	assert.Equal(t, 404, apiStatus(t, srv.base, olgaTok, "/operator"), "no longer an operator")

	srv.stop(t)
	log := roleAuditOf(t, data)
	require.Len(t, log, 3)
	assert.Equal(t, []string{"olga", "alice", "olga"}, []string{log[0].Target, log[1].Target, log[2].Target})
	assert.Equal(t, store.AuditOperatorRevoke, log[2].Action)
	for _, e := range log {
		assert.True(t, strings.HasPrefix(e.Actor, "cli:"), e.Actor)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/citegate/citegate/internal/pgtest"
	"github.com/citegate/citegate/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillBolt writes a bbolt database with every record kind, enough of them to span several copy
// batches, and returns what a user of the copy must find again.
type boltFixture struct {
	path       string
	token      string // alice's access token
	shareToken string
	sessions   []string
	lastMsg    uint64
}

func fillBolt(t *testing.T) boltFixture {
	t.Helper()
	ctx := context.Background()
	f := boltFixture{path: filepath.Join(t.TempDir(), "citegate.db")}
	// A clock with nanoseconds: the copy keeps times at PostgreSQL's microseconds.
	now := time.Date(2026, 11, 30, 8, 0, 0, 123456789, time.UTC)
	st, err := store.Open(f.path, store.Options{Now: func() time.Time { now = now.Add(time.Millisecond); return now }})
	require.NoError(t, err)
	defer st.Close()
	alice, token, err := st.CreateUser(ctx, "Alice")
	require.NoError(t, err)
	f.token = token
	// Alice chose English: the copy carries the interface language with the user.
	_, err = st.SetLanguage(ctx, alice.ID, store.LangEN)
	require.NoError(t, err)
	_, _, err = st.CreateUserRole(ctx, "op", true, store.Actor{Name: "cli:test"})
	require.NoError(t, err)
	_, _, err = st.CreateLoginCode(ctx, alice.ID, time.Minute)
	require.NoError(t, err)
	_, err = st.CreateWebSession(ctx, alice.ID, time.Hour)
	require.NoError(t, err)
	for i := range 6 {
		sess, err := st.CreateSession(ctx, store.Session{UserID: alice.ID, Channel: "desktop", Title: fmt.Sprintf("chat %d 年假", i)})
		require.NoError(t, err)
		f.sessions = append(f.sessions, sess.ID)
		require.NoError(t, st.BindConversation(ctx, fmt.Sprintf("feishu:oc_%d", i), sess.ID))
		for turn := range 3 {
			u, err := st.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprintf("q%d <b>&", turn)})
			require.NoError(t, err)
			run, err := st.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: u.ID})
			require.NoError(t, err)
			_, err = st.AppendMessage(ctx, store.Message{SessionID: sess.ID, RunID: run.ID, Role: store.RoleAssistant,
				ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"q"}`}}})
			require.NoError(t, err)
			_, err = st.AppendMessage(ctx, store.Message{SessionID: sess.ID, RunID: run.ID, Role: store.RoleTool,
				ToolCallID: "c1", ToolName: "web_search", Content: `{"results":[]}`})
			require.NoError(t, err)
			_, final, err := st.ConcludeRun(ctx, store.Conclusion{RunID: run.ID, Phase: store.PhaseCompleted, MarkersSeen: 1, MarkersKept: 1,
				Final: &store.Message{SessionID: sess.ID, RunID: run.ID, Role: store.RoleAssistant, Content: "a[^1^]",
					Metadata: json.RawMessage(`{"z":1,"citations":[{"n":1,"url":"https://a.example/"}]}`)}})
			require.NoError(t, err)
			f.lastMsg = final.ID
		}
		if i == 0 {
			var sh store.Share
			f.shareToken, sh, err = st.CreateShare(ctx, sess.ID, alice.ID, f.lastMsg)
			require.NoError(t, err)
			require.NoError(t, st.AddShareViews(ctx, []store.ShareViews{{ID: sh.TokenHash, Count: 7, Last: time.Now()}}))
		}
		_, err = st.MarkSeen(ctx, fmt.Sprintf("msg:feishu:%d", i), 48*time.Hour)
		require.NoError(t, err)
	}
	// A run the process left RUNNING: opening the file for the copy recovers it as FAILED, as a
	// start of serve would.
	_, err = st.CreateRun(ctx, store.Run{SessionID: f.sessions[0], Channel: "feishu"})
	require.NoError(t, err)
	return f
}

func TestStoreCopyIdempotentResumableVerified(t *testing.T) {
	ctx := context.Background()
	target := pgtest.Schema(t)
	f := fillBolt(t)

	// An interrupted copy: the third batch fails as a lost connection would.
	batches := 0
	var out bytes.Buffer
	err := storeCopy(ctx, f.path, target, store.CopyOptions{Batch: 7, AfterBatch: func(kind string, _ int) error {
		batches++
		if batches == 3 {
			return errors.New("connection lost")
		}
		return nil
	}}, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run the same command again to resume")

	// The second run goes on and verifies; a third finds nothing to do.
	code, stdout, stderr := runCLI(t, map[string]string{"CITEGATE_DATA": filepath.Dir(f.path)}, "store", "copy", "--to", target, "--batch", "7")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "verified")
	assert.NotContains(t, stdout, "MISMATCH")
	assert.NotContains(t, stdout, "@", "no credentials in the report")
	code, stdout, stderr = runCLI(t, map[string]string{"CITEGATE_DATA": filepath.Dir(f.path)}, "store", "copy", "--to", target)
	require.Equal(t, 0, code, stderr)
	for _, line := range strings.Split(stdout, "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 4 && fields[0] != "kind" && fields[0] != "copying" && fields[0] != "verified:" {
			assert.Equal(t, "0", fields[2], "a repeated copy inserts nothing: %s", line)
			assert.Equal(t, fields[1], fields[3], "source and target counts agree: %s", line)
		}
	}
	assert.Regexp(t, `(?m)^\s*messages\s+72\s+0\s+72\s`, stdout)

	// The PostgreSQL store serves what the bbolt one held.
	src, err := store.Open(f.path, store.Options{})
	require.NoError(t, err)
	defer src.Close()
	dst, err := store.OpenPG(ctx, target, store.Options{})
	require.NoError(t, err)
	defer dst.Close()
	u, err := dst.UserByToken(ctx, f.token)
	require.NoError(t, err)
	assert.Equal(t, "Alice", u.Name)
	assert.Equal(t, store.LangEN, u.Language)
	sh, err := dst.GetShare(ctx, f.shareToken)
	require.NoError(t, err)
	assert.Equal(t, f.sessions[0], sh.SessionID)
	assert.Equal(t, uint64(7), sh.Views, "view counts are copied")
	assert.Equal(t, 6, sh.Messages, "so is what the share covers")
	for _, sid := range f.sessions {
		want, err := src.ListMessages(ctx, sid)
		require.NoError(t, err)
		got, err := dst.ListMessages(ctx, sid)
		require.NoError(t, err)
		require.Len(t, got, len(want))
		for i := range want {
			want[i].CreatedAt = want[i].CreatedAt.Truncate(time.Microsecond)
		}
		assert.Equal(t, want, got)
		wantRuns, err := src.ListRuns(ctx, sid)
		require.NoError(t, err)
		gotRuns, err := dst.ListRuns(ctx, sid)
		require.NoError(t, err)
		require.Len(t, gotRuns, len(wantRuns))
		for i := range wantRuns {
			assert.Equal(t, wantRuns[i].ID, gotRuns[i].ID, "runs keep their order")
			assert.Equal(t, wantRuns[i].Phase, gotRuns[i].Phase)
		}
		bound, err := dst.ConversationSession(ctx, "feishu:oc_"+fmt.Sprint(indexOf(f.sessions, sid)))
		require.NoError(t, err)
		assert.Equal(t, sid, bound)
	}
	fresh, err := dst.MarkSeen(ctx, "msg:feishu:0", time.Hour)
	require.NoError(t, err)
	assert.False(t, fresh, "dedup keys came along")
	m, err := dst.AppendMessage(ctx, store.Message{SessionID: f.sessions[0], Role: store.RoleUser, Content: "after the copy"})
	require.NoError(t, err)
	assert.Greater(t, m.ID, f.lastMsg, "new ids continue after the copied ones")
	audit, err := dst.AuditSince(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	next, err := dst.AppendAudit(ctx, store.AuditEntry{Actor: "cli:test", Action: store.AuditExport})
	require.NoError(t, err)
	assert.Greater(t, next.ID, audit[0].ID)

	// A target record that differs from the source fails verification and is not overwritten.
	_, err = dst.Pool().Exec(ctx, `UPDATE messages SET content = 'tampered' WHERE id = 1`)
	require.NoError(t, err)
	require.NoError(t, src.Close())
	out.Reset()
	err = storeCopy(ctx, f.path, target, store.CopyOptions{}, &out)
	require.ErrorIs(t, err, store.ErrCopyMismatch)
	assert.Regexp(t, `(?m)^\s*messages\s.*MISMATCH`, out.String())
	got, err := dst.GetMessage(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, "tampered", got.Content)
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// The copy needs the bbolt file to itself and says so when serve (or anyone) holds it.
func TestStoreCopyRefusesWhileServing(t *testing.T) {
	target := pgtest.Schema(t)
	f := fillBolt(t)
	held, err := store.Open(f.path, store.Options{})
	require.NoError(t, err)
	defer held.Close()
	code, _, stderr := runCLI(t, map[string]string{"CITEGATE_DATA": filepath.Dir(f.path)}, "store", "copy", "--to", target)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "in use by a running citegate serve: stop it first")
}

// With --store postgres://… the admin commands talk to the database directly (no admin socket,
// no file lock), backup explains pg_dump, and a bad --store value is refused plainly.
func TestPostgresStoreCommands(t *testing.T) {
	target := pgtest.Schema(t)
	kv := map[string]string{"CITEGATE_DATA": t.TempDir(), "CITEGATE_STORE": target}
	code, out, stderr := runCLI(t, kv, "user", "add", "alice")
	require.Equal(t, 0, code, stderr)
	token := strings.TrimSpace(out)
	code, out, stderr = runCLI(t, kv, "user", "list")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "alice")
	st, err := store.OpenPG(context.Background(), target, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	u, err := st.UserByToken(context.Background(), token)
	require.NoError(t, err)
	assert.Equal(t, "alice", u.Name)

	code, _, stderr = runCLI(t, kv, "backup", filepath.Join(t.TempDir(), "copy.db"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "pg_dump")

	code, _, stderr = runCLI(t, map[string]string{"CITEGATE_STORE": "mysql://user:secret@db/x"}, "user", "list")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "expected a postgres:// or postgresql:// URL")
	assert.NotContains(t, stderr, "secret")
}

// A real serve process on PostgreSQL names its store in the summary without the password.
func TestServeOnPostgresSummary(t *testing.T) {
	target := pgtest.Schema(t)
	withPassword := strings.Replace(target, "postgres://", "postgres://root:s3cr3t-pw@", 1)
	env := cliEnv(t, "CITEGATE_DATA="+t.TempDir(), "CITEGATE_LOG_LEVEL=warn", "CITEGATE_STORE="+withPassword)
	srv := startServe(t, env, "--addr", cliFreeAddr(t))
	out := srv.stdout.String()
	assert.Regexp(t, `(?m)^  store +postgresql postgres://root:xxxxx@`, out)
	assert.NotContains(t, out+srv.stderr.String(), "s3cr3t-pw")
	// Ready once the store answers and the replicas' event bus listens (a moment after start); the
	// bound only limits a hang.
	deadline := time.Now().Add(30 * time.Second)
	for apiStatus(t, srv.base, "", "/readyz") != 200 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(t, 200, apiStatus(t, srv.base, "", "/readyz"))
}

// TestServeStoreFlag: `serve --store postgres://…` (the flag, not CITEGATE_STORE) puts the server
// on PostgreSQL and it becomes ready; the bbolt file in --data is not created.
func TestServeStoreFlag(t *testing.T) {
	target := pgtest.Schema(t)
	data := t.TempDir()
	env := cliEnv(t, "CITEGATE_DATA="+data, "CITEGATE_LOG_LEVEL=warn")
	srv := startServe(t, env, "--addr", cliFreeAddr(t), "--store", target)
	assert.Regexp(t, `(?m)^  store +postgresql postgres://`, srv.stdout.String())
	deadline := time.Now().Add(30 * time.Second) // bounds a hang only
	for apiStatus(t, srv.base, "", "/readyz") != 200 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(t, 200, apiStatus(t, srv.base, "", "/readyz"))
	assert.NoFileExists(t, filepath.Join(data, "citegate.db"))
}

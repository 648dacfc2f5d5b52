package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/internal/testkit"
	"github.com/citegate/citegate/store"
)

// crashQuestions are answered from the bundled corpus, so runs complete with verified citations.
var crashQuestions = []string{
	"电子发票抬头写错了怎么办？",
	"年假有几天？",
	"差旅住宿标准是多少？",
	"怎么申请VPN？",
	"报销需要哪些材料？",
	"忘记密码怎么重置？",
	"How do I reset my password?",
	"会议室怎么预订？",
}

// TestCrashLoopKeepsRecordsAtomic kills a real `citegate serve` (kill -9, by pid) at random
// instants while websocket clients keep turns running, restarts it on the same data directory, and
// finally checks every stored run (DESIGN §4, atomic record): no final answer under a FAILED or
// RUNNING run, every COMPLETED run has its final answer (ids consistent) and, when that answer has
// valid markers, exactly the citations the run's own tool results verify. The verdict depends only
// on what is stored, never on timing; the waits only bound a hang.
func TestCrashLoopKeepsRecordsAtomic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and crashes citegate processes repeatedly; skipped with -short")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfgPath := filepath.Join(dir, "citegate.yaml")
	// The per-user chat rate limit would otherwise throttle the load to 20 turns a minute.
	require.NoError(t, os.WriteFile(cfgPath, []byte("chat_rate_per_minute: 10000000\n"), 0o600))

	// The user is added while no server runs (directly in the database).
	add := citegateProcess("user", "add", "--data", data, "crash")
	var addOut, addErr bytes.Buffer
	add.Stdout, add.Stderr = &addOut, &addErr
	require.NoError(t, add.Run(), "user add: %s", addErr.String())
	token := strings.TrimSpace(addOut.String())
	require.NotEmpty(t, token)

	const crashes = 12
	deadline := time.Now().Add(60 * time.Second) // bounds the loop on a very slow machine
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var finishedTotal atomic.Int64
	done := 0
	// At least three crashes whatever the machine's speed; more while the time bound allows.
	for ; done < crashes && (done < 3 || time.Now().Before(deadline)); done++ {
		addr := freeAddr(t)
		var logs testkit.SyncBuffer
		srv := citegateProcess("serve", "--data", data, "--addr", addr, "--config", cfgPath, "--log-level", "error")
		srv.Stdout, srv.Stderr = &logs, &logs
		require.NoError(t, srv.Start())
		waitHealthy(t, "http://"+addr, &logs)

		// Load: several clients, each sending its next turn when the previous one finished, now and
		// then cancelling a run mid-answer (CANCELLED runs keep their partial text).
		ctx, stop := context.WithCancel(context.Background())
		var finished atomic.Int64
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() { crashLoadClient(ctx, "ws://"+addr+"/ws", token, c, &finished) })
		}
		// Kill only once turns are completing, at a random instant after that.
		waitUntil(t, 30*time.Second, func() bool { return finished.Load() > 0 }, "no run finished after a restart: %s", &logs)
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		require.NoError(t, srv.Process.Kill()) // SIGKILL by pid
		_ = srv.Wait()
		stop()
		wg.Wait()
		finishedTotal.Add(finished.Load())
	}

	st, err := store.Open(filepath.Join(data, "citegate.db"), store.Options{Timeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	defer st.Close()
	rep := checkStoredRuns(t, st, token)
	t.Logf("%d crashes, %d run.finished frames seen; stored runs: %d completed (%d with citations), %d failed (%d interrupted), %d cancelled",
		done, finishedTotal.Load(), rep.completed, rep.cited, rep.failed, rep.interrupted, rep.cancelled)
	require.Positive(t, rep.completed, "the check saw completed runs")
	require.Positive(t, rep.cited, "the check saw completed runs with citations")
}

// crashHelperEnv carries the command line of a citegate process run by TestCrashHelperProcess.
const crashHelperEnv = "CITEGATE_CRASH_HELPER_ARGS"

// citegateProcess returns a command that runs citegate with args in a process of its own: the test
// binary re-executed into TestCrashHelperProcess, which runs the same code as main. (Building the
// binary with go build took minutes on the shared, loaded machine; this process is the same
// program without that cost.)
func citegateProcess(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+strings.Join(args, "\x1f"))
	return cmd
}

// TestCrashHelperProcess is not a test: it is the body of citegateProcess (main, with its
// signal handling), and does nothing in a normal test run.
func TestCrashHelperProcess(t *testing.T) {
	raw := os.Getenv(crashHelperEnv)
	if raw == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, strings.Split(raw, "\x1f"), os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// waitUntil polls cond until it holds or timeout passes (which fails the test: a hang, not a verdict).
func waitUntil(t *testing.T, timeout time.Duration, cond func() bool, msg string, logs *testkit.SyncBuffer) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf(msg, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitHealthy(t *testing.T, base string, logs *testkit.SyncBuffer) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	waitUntil(t, 30*time.Second, func() bool {
		resp, err := client.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "serve did not become healthy: %s", logs)
}

// crashLoadClient keeps one websocket client sending turns until ctx ends or the server dies.
func crashLoadClient(ctx context.Context, url, token string, id int, finished *atomic.Int64) {
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	conn, _, err := dialer.DialContext(ctx, url, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		return
	}
	defer conn.Close()
	go func() {
		<-ctx.Done()
		_ = conn.Close()
	}()
	sessionID := ""
	for turn := 0; ctx.Err() == nil; turn++ {
		if turn%6 == 0 {
			sessionID = "" // a new session now and then
		}
		send := map[string]string{"type": "chat.send", "text": crashQuestions[(id+turn)%len(crashQuestions)], "clientMsgId": fmt.Sprint(id, "-", turn)}
		if sessionID != "" {
			send["sessionId"] = sessionID
		}
		if conn.WriteJSON(send) != nil {
			return
		}
		cancel := turn%5 == 4
		for {
			var f struct {
				Type        string `json:"type"`
				SessionID   string `json:"sessionId"`
				ClientMsgID string `json:"clientMsgId"`
			}
			if conn.ReadJSON(&f) != nil {
				return
			}
			// Every connection of the user sees every session's frames: follow only this turn's.
			if f.Type == "session.created" && f.ClientMsgID == send["clientMsgId"] {
				sessionID = f.SessionID
			}
			if sessionID == "" || f.SessionID != sessionID {
				continue
			}
			if f.Type == "answer.delta" && cancel {
				cancel = false
				if conn.WriteJSON(map[string]string{"type": "chat.cancel", "sessionId": sessionID}) != nil {
					return
				}
			}
			if f.Type == "run.finished" {
				finished.Add(1)
				break
			}
		}
	}
}

type crashReport struct {
	completed, cited, failed, interrupted, cancelled int
}

// checkStoredRuns checks every run of the token's user against the atomic-record contract.
func checkStoredRuns(t *testing.T, st *store.Store, token string) crashReport {
	t.Helper()
	ctx := context.Background()
	user, err := st.UserByToken(ctx, token)
	require.NoError(t, err)
	sessions, err := st.ListSessions(ctx, user.ID)
	require.NoError(t, err)
	var rep crashReport
	for _, sess := range sessions {
		runs, err := st.ListRuns(ctx, sess.ID)
		require.NoError(t, err)
		msgs, err := st.ListMessages(ctx, sess.ID)
		require.NoError(t, err)
		byRun := map[string][]store.Message{}
		for _, m := range msgs {
			byRun[m.RunID] = append(byRun[m.RunID], m)
		}
		for _, r := range runs {
			checkStoredRun(t, r, byRun[r.ID], &rep)
		}
	}
	return rep
}

func checkStoredRun(t *testing.T, r store.Run, msgs []store.Message, rep *crashReport) {
	t.Helper()
	var answers []store.Message // ASSISTANT messages without tool calls: final or partial answers
	var results []citations.ToolResult
	for _, m := range msgs {
		switch {
		case m.Role == store.RoleAssistant && len(m.ToolCalls) == 0:
			answers = append(answers, m)
		case m.Role == store.RoleTool:
			results = append(results, citations.ToolResult{Tool: m.ToolName, CallID: m.ToolCallID, MessageID: m.ID, Content: m.Content, At: m.CreatedAt})
		}
	}
	require.LessOrEqual(t, len(answers), 1, "run %s has %d answers", r.ID, len(answers))
	switch r.Phase {
	case store.PhaseRunning:
		t.Fatalf("run %s is still RUNNING after the store was opened again", r.ID)
	case store.PhaseFailed, store.PhaseCancelled:
		if r.Phase == store.PhaseFailed {
			rep.failed++
			if r.Error == "interrupted" {
				rep.interrupted++
			}
		} else {
			rep.cancelled++
		}
		for _, m := range answers {
			require.True(t, isPartial(m), "run %s is %s (%q) yet has a final answer (message %d: %q)", r.ID, r.Phase, r.Error, m.ID, m.Content)
			require.Equal(t, m.ID, r.FinalMessageID, "run %s: its partial answer is its final message", r.ID)
			require.Empty(t, citations.FromMetadata(m.Metadata), "run %s: %s runs get no citations", r.ID, r.Phase)
		}
		if len(answers) == 0 {
			require.Zero(t, r.FinalMessageID, "run %s points at a message it does not have", r.ID)
		}
	case store.PhaseCompleted:
		rep.completed++
		require.Len(t, answers, 1, "COMPLETED run %s has no final answer", r.ID)
		final := answers[0]
		require.False(t, isPartial(final), "run %s: COMPLETED with a partial answer", r.ID)
		require.Equal(t, final.ID, r.FinalMessageID, "run %s: final message id", r.ID)
		// The oracle: the registry rebuilt from the run's own stored tool results.
		want := citations.Verify(final.Content, citations.BuildRegistry(results))
		got := citations.FromMetadata(final.Metadata)
		require.Equal(t, len(want.Citations), len(got), "run %s: stored citations %v, its markers verify %v", r.ID, got, want.Citations)
		for i := range got {
			require.Equal(t, want.Citations[i].N, got[i].N, "run %s", r.ID)
			require.Equal(t, want.Citations[i].URL, got[i].URL, "run %s", r.ID)
		}
		require.Equal(t, [3]int{want.Seen, want.Kept, want.Dropped}, [3]int{r.MarkersSeen, r.MarkersKept, r.MarkersDropped}, "run %s: marker counts", r.ID)
		if len(got) > 0 {
			rep.cited++
		}
	default:
		t.Fatalf("run %s has phase %q", r.ID, r.Phase)
	}
}

func isPartial(m store.Message) bool {
	var meta struct {
		Interrupted bool `json:"interrupted"`
	}
	return len(m.Metadata) > 0 && json.Unmarshal(m.Metadata, &meta) == nil && meta.Interrupted
}

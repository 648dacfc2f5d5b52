package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

// server is a real citegate gateway in this process: bbolt on a temp dir, the agent with the offline
// extractive model searching the bundled corpus, on a loopback HTTP server.
type server struct {
	st    *store.Store
	url   string
	token string
	user  store.User
}

func startServer(t *testing.T, chatRate int) *server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	st, err := store.Open(filepath.Join(t.TempDir(), "citegate.db"), store.Options{Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	corpus, err := tools.LoadCorpus("", base)
	require.NoError(t, err)
	fetcher, err := tools.NewFetcher(tools.FetchOptions{Logger: log}, corpus)
	require.NoError(t, err)
	ag, err := agent.New(agent.Config{Store: st, Model: extractive.New(), Logger: log,
		Tools: []agent.Tool{tools.NewWebSearch(corpus, log), tools.NewOpenWebPage(fetcher)}})
	require.NoError(t, err)
	srv, err := gateway.New(gateway.Config{Store: st, Agent: ag, Addr: ts.Listener.Addr().String(), PublicURL: base,
		DataDir: t.TempDir(), ChatRatePerMinute: chatRate, Logger: log})
	require.NoError(t, err)
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = ag.Close(ctx)
	})
	u, token, err := st.CreateUser(context.Background(), "loadtest")
	require.NoError(t, err)
	return &server{st: st, url: base, token: token, user: u}
}

func runJSON(t *testing.T, args ...string) Report {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, append(args, "--json"), &out, &errb), errb.String())
	var rep Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	return rep
}

// TestThroughputAgainstRealServer: four sessions over two connections until 12 turns completed;
// every counted turn is a COMPLETED run in the store, the sessions are the user's, and the server's
// CPU (this process) is reported per turn.
func TestThroughputAgainstRealServer(t *testing.T) {
	s := startServer(t, 1_000_000)
	args := []string{"--url", s.url, "--token", s.token, "--sessions", "4", "--conns", "2",
		"--turns", "12", "--duration", "5m", "--warmup", "0"}
	if runtime.GOOS == "linux" {
		args = append(args, "--server-pid", strconv.Itoa(os.Getpid()))
	}
	rep := runJSON(t, args...)
	assert.GreaterOrEqual(t, rep.Turns, 12)
	assert.Zero(t, rep.Errors, "%v", rep.ErrorSamples)
	assert.Zero(t, rep.FailedRuns, "%v", rep.ErrorSamples)
	assert.Equal(t, 4, rep.Sessions)
	assert.Equal(t, 2, rep.Conns)
	assert.Greater(t, rep.P50Ms, 0.0)
	assert.LessOrEqual(t, rep.P50Ms, rep.P90Ms)
	assert.LessOrEqual(t, rep.P90Ms, rep.P99Ms)
	assert.LessOrEqual(t, rep.P99Ms, rep.MaxMs)
	assert.Greater(t, rep.TurnsPerSec, 0.0)
	assert.Greater(t, rep.StreamFrames, int64(0), "the answers streamed")
	assert.Zero(t, rep.DroppedFrames)
	assert.Equal(t, 1, rep.Users)
	assert.Equal(t, 2.0, rep.ConnsPerUser)
	assert.GreaterOrEqual(t, rep.FrameTypes["run.finished"], int64(rep.Turns), "every counted turn's run.finished was counted")
	assert.GreaterOrEqual(t, rep.FrameTypes["answer.final"], int64(rep.Turns))
	assert.Positive(t, rep.FrameTypes["answer.delta"])
	assert.InDelta(t, float64(rep.Frames)/float64(rep.Turns), rep.FramesPerTurn, 1e-9)
	assert.InDelta(t, rep.FramesPerTurn/2, rep.FramesPerTurnPerConn, 1e-9)
	if runtime.GOOS == "linux" {
		require.NotNil(t, rep.ServerCPUMsPerTurn)
		assert.Greater(t, *rep.ServerCPUMsPerTurn, 0.0)
	}

	ctx := context.Background()
	sessions, err := s.st.ListSessions(ctx, s.user.ID)
	require.NoError(t, err)
	assert.Len(t, sessions, 4, "one session per simulated conversation")
	completed := 0
	for _, sess := range sessions {
		runs, err := s.st.ListRuns(ctx, sess.ID)
		require.NoError(t, err)
		for _, r := range runs {
			if r.Phase == store.PhaseCompleted {
				completed++
			}
		}
	}
	assert.GreaterOrEqual(t, completed, rep.Turns, "every reported turn is a completed run in the store")
}

// TestThroughputOverSeveralUsers: with two tokens the sessions and connections are spread over
// two users, each connection carrying its own user's sessions only.
func TestThroughputOverSeveralUsers(t *testing.T) {
	s := startServer(t, 1_000_000)
	u2, tok2, err := s.st.CreateUser(context.Background(), "loadtest2")
	require.NoError(t, err)
	rep := runJSON(t, "--url", s.url, "--token", s.token+","+tok2, "--sessions", "4", "--conns", "2",
		"--turns", "8", "--duration", "5m", "--warmup", "0")
	assert.GreaterOrEqual(t, rep.Turns, 8)
	assert.Zero(t, rep.Errors, "%v", rep.ErrorSamples)
	assert.Equal(t, 2, rep.Users)
	assert.Equal(t, 1.0, rep.ConnsPerUser)
	for _, u := range []store.User{s.user, u2} {
		sessions, err := s.st.ListSessions(context.Background(), u.ID)
		require.NoError(t, err)
		assert.Len(t, sessions, 2, "two of the four sessions are %s's", u.Name)
	}
	var out, errb bytes.Buffer
	err = run(context.Background(), []string{"--token", strings.Repeat("t,", 2), "--sessions", "40", "--conns", "40", "--url", s.url}, &out, &errb)
	var ue usageError
	assert.ErrorAs(t, err, &ue, "40 connections of 2 users exceed the server's 16 per user")
}

// TestDepthAgainstRealServer: one session, eight turns; the report's message count is the session's
// real length, and the turns past message 10 are compared with the first three.
func TestDepthAgainstRealServer(t *testing.T) {
	s := startServer(t, 1_000_000)
	rep := runJSON(t, "--url", s.url, "--token", s.token, "--mode", "depth", "--turns", "8", "--first", "3", "--after", "10")
	assert.Equal(t, 8, rep.Turns, "%v", rep.ErrorSamples)
	require.NotNil(t, rep.Depth)
	d := rep.Depth
	assert.Equal(t, 3, d.FirstTurns)
	assert.Greater(t, d.FirstMedianMs, 0.0)

	sessions, err := s.st.ListSessions(context.Background(), s.user.ID)
	require.NoError(t, err)
	require.Len(t, sessions, 1)
	msgs, err := s.st.ListMessages(context.Background(), sessions[0].ID)
	require.NoError(t, err)
	assert.Equal(t, len(msgs), d.Messages, "message count from the frames' ids = the stored session")

	// Recount which turns started past message 10 from the stored record.
	past, count := 0, 0
	for _, m := range msgs {
		if m.Role == store.RoleUser && count > 10 {
			past++
		}
		count++
	}
	assert.Equal(t, past, d.PastTurns)
	require.Positive(t, d.PastTurns)
	assert.InDelta(t, d.PastMedianMs/d.FirstMedianMs, d.Ratio, 1e-9)
}

// TestErrorsAreCounted: a server whose per-user chat limit refuses most sends; the refusals are
// counted as errors (with the server's code in the samples), not as turns.
func TestErrorsAreCounted(t *testing.T) {
	s := startServer(t, 1) // burst of 5, then one per minute
	rep := runJSON(t, "--url", s.url, "--token", s.token, "--sessions", "2", "--duration", "2s", "--warmup", "0")
	assert.LessOrEqual(t, rep.Turns, 6)
	assert.Positive(t, rep.Errors)
	require.NotEmpty(t, rep.ErrorSamples)
	assert.Contains(t, strings.Join(rep.ErrorSamples, "\n"), "rate_limited")
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--url", "http://127.0.0.1:1"},                     // no token
		{"--token", "x", "--url", "ftp://h"},                // bad scheme
		{"--token", "x", "--mode", "sideways"},              // bad mode
		{"--token", "x", "--mode", "depth", "--first", "0"}, // bad baseline
		{"--token", "x", "--sessions", "0"},                 // no sessions
		{"--token", "x", "extra"},                           // stray argument
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), args, &out, &errb)
		var ue usageError
		assert.ErrorAs(t, err, &ue, "%v", args)
		assert.Equal(t, 2, exitCode(err))
	}
}

// TestUnreachableServer: a refused connection is an error naming the address, not a report.
func TestUnreachableServer(t *testing.T) {
	ts := httptest.NewServer(nil)
	addr := ts.URL
	ts.Close()
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"--url", addr, "--token", "x", "--duration", "1s"}, &out, &errb)
	require.Error(t, err)
	assert.Contains(t, err.Error(), strings.TrimPrefix(addr, "http://"))
	assert.Equal(t, 1, exitCode(err))
}

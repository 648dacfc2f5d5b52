package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/internal/pgtest"
	"github.com/citegate/citegate/internal/testkit"
)

// deltaArrival is when a connection had received the first `offset` bytes of a run's answer.
type deltaArrival struct {
	offset int
	at     time.Time
}

// TestReplicasDeltaLatency measures what the event bus adds to answer.delta delivery: two real
// `serve` processes (offline extractive model) on one PostgreSQL database, one user with three
// connections — two to replica A, which runs the turns, one to replica B. For every delta B
// receives, the added latency is B's arrival time minus the time A's first connection had received
// the same prefix of the answer; A's second connection, measured the same way, is the same-replica
// baseline. It reports p50/p99 of both (docs/benchmarks.md) and decides nothing: it runs only with
// CITEGATE_REPLICAS_BENCH=1 and a test database.
func TestReplicasDeltaLatency(t *testing.T) {
	if os.Getenv("CITEGATE_REPLICAS_BENCH") != "1" {
		t.Skip("a measurement: set CITEGATE_REPLICAS_BENCH=1 (and CITEGATE_TEST_POSTGRES) to run it")
	}
	dbURL := pgtest.Schema(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "citegate.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("chat_rate_per_minute: 100000\n"), 0o600))
	env := []string{"CITEGATE_STORE=" + dbURL, "CITEGATE_LOG_LEVEL=error"}
	add := citegateProcess("user", "add", "bench")
	add.Env = append(add.Env, env...)
	out, err := add.Output()
	require.NoError(t, err)
	token := strings.TrimSpace(string(out))
	var bases []string
	for _, name := range []string{"a", "b"} {
		addr := freeAddr(t)
		logs := &testkit.SyncBuffer{}
		cmd := citegateProcess("serve", "--data", filepath.Join(dir, name), "--addr", addr, "--config", cfgPath)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = logs, logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		base := "http://" + addr
		waitHealthy(t, base, logs)
		bases = append(bases, base)
	}
	time.Sleep(time.Second) // both buses listening (readyz checks it in the functional test)
	dial := func(base string) *websocket.Conn {
		c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws", map[string][]string{"Authorization": {"Bearer " + token}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	conns := []*websocket.Conn{dial(bases[0]), dial(bases[0]), dial(bases[1])}
	// arrivals[i][runID] lists connection i's cumulative answer bytes over time.
	arrivals := make([]map[string][]deltaArrival, len(conns))
	finished := make(chan string, 1024)
	var mu sync.Mutex
	for i, c := range conns {
		arrivals[i] = map[string][]deltaArrival{}
		go func() {
			for {
				var f struct{ Type, RunID, Text, SessionID string }
				if c.ReadJSON(&f) != nil {
					return
				}
				now := time.Now()
				mu.Lock()
				if f.Type == "answer.delta" {
					a := arrivals[i][f.RunID]
					off := len(f.Text)
					if len(a) > 0 {
						off += a[len(a)-1].offset
					}
					arrivals[i][f.RunID] = append(a, deltaArrival{offset: off, at: now})
				}
				mu.Unlock()
				if f.Type == "run.finished" && i == 2 {
					finished <- f.SessionID
				}
			}
		}()
	}
	const turns = 60
	questions := crashQuestions
	sid := ""
	for turn := range turns {
		send := map[string]any{"type": "chat.send", "text": questions[turn%len(questions)]}
		if sid != "" {
			send["sessionId"] = sid
		}
		require.NoError(t, conns[0].WriteJSON(send))
		select {
		case s := <-finished:
			sid = s
		case <-time.After(60 * time.Second):
			t.Fatal("a turn did not finish on B")
		}
		if turn%10 == 9 {
			sid = "" // a new session now and then
		}
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	added := func(i int) []time.Duration {
		var out []time.Duration
		for run, ref := range arrivals[0] {
			for _, d := range arrivals[i][run] {
				// When did A's first connection have this prefix?
				k := slices.IndexFunc(ref, func(r deltaArrival) bool { return r.offset >= d.offset })
				if k >= 0 {
					out = append(out, d.at.Sub(ref[k].at))
				}
			}
		}
		slices.Sort(out)
		return out
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[int(p*float64(len(ds)-1))]
	}
	same, cross := added(1), added(2)
	require.NotEmpty(t, cross, "B received no deltas")
	t.Logf("turns %d; same replica (second connection on A): %d deltas, added p50 %v p99 %v", turns, len(same), pct(same, .5), pct(same, .99))
	t.Logf("other replica (connection on B): %d deltas (coalesced from %d), added p50 %v p99 %v", len(cross), countAll(arrivals[0]), pct(cross, .5), pct(cross, .99))
}

func countAll(m map[string][]deltaArrival) int {
	n := 0
	for _, a := range m {
		n += len(a)
	}
	return n
}

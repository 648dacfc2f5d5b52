package dingtalk_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/dingtalk"
	"github.com/citegate/citegate/citations"
	dingtalkfake "github.com/citegate/citegate/internal/fakes/dingtalk"
	"github.com/citegate/citegate/internal/testkit"
)

// recorder is a channels.Handler that records what it receives.
type recorder struct {
	mu   sync.Mutex
	msgs []channels.Message
	ch   chan channels.Message
}

func newRecorder() *recorder { return &recorder{ch: make(chan channels.Message, 100)} }

func (r *recorder) HandleMessage(_ context.Context, m channels.Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	r.ch <- m
}

func (r *recorder) next(t *testing.T) channels.Message {
	t.Helper()
	select {
	case m := <-r.ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message delivered to the handler within 5s")
		return channels.Message{}
	}
}

// env is one fake DingTalk plus a channel configured against it.
type env struct {
	fake *dingtalkfake.Server
	ch   *dingtalk.Channel
	logs *testkit.SyncBuffer
	cfg  dingtalk.Config
}

func newEnv(t *testing.T, mod func(*dingtalk.Config)) *env {
	t.Helper()
	fake := dingtalkfake.New(dingtalkfake.Options{DisconnectGrace: 200 * time.Millisecond})
	t.Cleanup(fake.Close)
	logs := &testkit.SyncBuffer{}
	cfg := dingtalk.Config{
		ClientID:         "ding-client",
		ClientSecret:     "ding-secret",
		APIBaseURL:       fake.URL,
		StreamBaseURL:    fake.URL,
		KeepAlive:        time.Second,
		ReconnectBackoff: 20 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(io.MultiWriter(logs), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	ch, err := dingtalk.New(cfg)
	require.NoError(t, err)
	return &env{fake: fake, ch: ch, logs: logs, cfg: cfg}
}

// start runs ch.Start(h) until the test ends and waits for the first connection.
func (e *env) start(t *testing.T, h channels.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.ch.Start(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start returned %v after cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Start did not return within 5s of cancel")
		}
	})
	e.await(t, func() bool { return e.fake.LiveConnections() >= 1 })
}

func (e *env) await(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.fake.Await(ctx, cond))
}

// assertNoMarkerBytes checks every byte the fake received (HTTP bodies and websocket frames) for a
// marker or the start of one.
func assertNoMarkerBytes(t *testing.T, fake *dingtalkfake.Server) {
	t.Helper()
	for _, r := range fake.Requests("") {
		body := string(r.Body)
		require.Empty(t, citations.Markers(body), "marker in %s %s: %s", r.Method, r.Path, body)
		require.NotContains(t, body, "[^", "partial marker in %s %s: %s", r.Method, r.Path, body)
	}
	for _, f := range fake.Frames() {
		require.NotContains(t, string(f.Raw), "[^")
	}
}

package feishu_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/feishu"
	"github.com/citegate/citegate/internal/fakes/feishu"
	"github.com/citegate/citegate/internal/testkit"
)

// recorder is a channels.Handler that records what it is handed.
type recorder struct {
	mu   sync.Mutex
	msgs []channels.Message
	got  chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 100)} }

func (r *recorder) HandleMessage(_ context.Context, m channels.Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *recorder) messages() []channels.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]channels.Message(nil), r.msgs...)
}

type harness struct {
	fake   *feishufake.Server
	ch     *feishu.Channel
	logs   *testkit.SyncBuffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// newChannel builds a channel against fake; mutate adjusts the config.
func newChannel(t *testing.T, fake *feishufake.Server, mutate func(*feishu.Config)) (*feishu.Channel, *testkit.SyncBuffer) {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	o := fake.Options()
	cfg := feishu.Config{
		AppID: o.AppID, AppSecret: o.AppSecret, BaseURL: fake.URL(),
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ch, err := feishu.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("channel logs:\n%s", logs.String())
		}
	})
	return ch, logs
}

// startLongConn starts a long-connection channel with h and waits until the fake sees the socket.
func startLongConn(t *testing.T, fake *feishufake.Server, h channels.Handler, mutate func(*feishu.Config)) *harness {
	t.Helper()
	return startLongConnWith(t, fake, func(channels.Channel) channels.Handler { return h }, mutate)
}

// startLongConnWith is startLongConn for handlers that need the channel (the dispatcher's).
func startLongConnWith(t *testing.T, fake *feishufake.Server, handler func(channels.Channel) channels.Handler, mutate func(*feishu.Config)) *harness {
	t.Helper()
	ch, logs := newChannel(t, fake, mutate)
	h := handler(ch)
	before := fake.Connected()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ch.Start(ctx, h) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	select {
	case err := <-done:
		cancel()
		t.Fatalf("Start returned early: %v", err)
	default:
	}
	require.NoError(t, fake.WaitConnected(wctx, before+1))
	hs := &harness{fake: fake, ch: ch, logs: logs, cancel: cancel, done: done}
	t.Cleanup(func() { _ = hs.stop() })
	return hs
}

// stop ends the channel's Start and returns its result (once; later calls return the same).
func (h *harness) stop() error {
	h.once.Do(func() {
		h.cancel()
		select {
		case h.err = <-h.done:
		case <-time.After(5 * time.Second):
			h.err = errors.New("Start did not return after its context ended")
		}
	})
	return h.err
}

func newFake(t *testing.T) *feishufake.Server {
	t.Helper()
	f := feishufake.New(feishufake.Options{})
	t.Cleanup(f.Close)
	return f
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

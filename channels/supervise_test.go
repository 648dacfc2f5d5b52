package channels

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stepper hands the supervisor's waits to the test: each wait shows up on waits, and the test lets
// it pass by sending on the returned channel.
type stepper struct{ waits chan chan time.Time }

func newStepper() *stepper { return &stepper{waits: make(chan chan time.Time)} }

func (s *stepper) after(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	s.waits <- c
	return c
}

func (s *stepper) next(t *testing.T) chan time.Time {
	t.Helper()
	select {
	case c := <-s.waits:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the supervisor never waited to retry")
		return nil
	}
}

type scriptedChannel struct {
	name   string
	starts atomic.Int32
	start  func(ctx context.Context, n int) error
}

func (c *scriptedChannel) Name() string { return c.name }
func (c *scriptedChannel) Start(ctx context.Context, _ Handler) error {
	return c.start(ctx, int(c.starts.Add(1)))
}
func (c *scriptedChannel) Reply(context.Context, Message) (Reply, error) { return nil, nil }
func (c *scriptedChannel) Send(context.Context, Message, string) error   { return nil }
func (c *scriptedChannel) Limits() Limits                                { return Limits{} }

func TestBackoffCappedAndJittered(t *testing.T) {
	for _, r := range []float64{0, 0.5, 0.999} {
		s := NewSupervisor(SupervisorConfig{Initial: time.Second, Max: 30 * time.Second, Rand: func() float64 { return r }})
		for n, full := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second, 6: 30 * time.Second, 60: 30 * time.Second} {
			d := s.Backoff(n)
			assert.GreaterOrEqual(t, d, full/2, "n=%d r=%v", n, r)
			assert.LessOrEqual(t, d, full, "n=%d r=%v", n, r)
			assert.Equal(t, full/2+time.Duration(r*float64(full/2)), d)
		}
	}
}

type credErr struct{}

func (credErr) Error() string             { return "code 10014: app secret invalid" }
func (credErr) CredentialsRejected() bool { return true }

func TestExplainInPlainWords(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, refused := http.Get("http://" + addr)
	require.Error(t, refused)
	assert.Contains(t, Explain(fmt.Errorf("wechat start: %w", refused)), "unreachable: connection refused")

	dns := &net.DNSError{Err: "no such host", Name: "open.feishu.invalid", IsNotFound: true}
	assert.Contains(t, Explain(fmt.Errorf("x: %w", dns)), "cannot resolve open.feishu.invalid")
	assert.Contains(t, Explain(fmt.Errorf("x: %w", credErr{})), "rejected the credentials")
	assert.Contains(t, Explain(errors.New("base_url must be https")), "configuration is wrong")
	assert.NotContains(t, Explain(refused), "credentials")
}

func TestSupervisorRetriesThenConnects(t *testing.T) {
	step := newStepper()
	sup := NewSupervisor(SupervisorConfig{After: step.after, Rand: func() float64 { return 0 }})
	down := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	ch := &scriptedChannel{name: "wechat", start: func(ctx context.Context, n int) error {
		if n <= 2 {
			return fmt.Errorf("wechat: start: %w", &net.OpError{Op: "dial", Net: "tcp", Err: down})
		}
		return nil // a webhook channel: ready
	}}
	sup.Register(ch)
	st, _ := sup.State("wechat")
	assert.Equal(t, PhaseStarting, st.Phase)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx, ch, nil) }()
	for attempt := 1; attempt <= 2; attempt++ {
		wait := step.next(t)
		st, _ := sup.State("wechat")
		assert.Equal(t, PhaseRetrying, st.Phase)
		assert.Equal(t, attempt, st.Attempts)
		assert.Contains(t, st.Reason, "platform unreachable")
		wait <- time.Now()
	}
	require.Eventually(t, func() bool { st, _ := sup.State("wechat"); return st.Phase == PhaseConnected }, 30*time.Second, time.Millisecond)
	cancel()
	<-done
	assert.Equal(t, int32(3), ch.starts.Load())
}

func TestSupervisorRestartsEndedConnection(t *testing.T) {
	step := newStepper()
	sup := NewSupervisor(SupervisorConfig{After: step.after})
	ch := &scriptedChannel{name: "feishu", start: func(ctx context.Context, n int) error {
		MarkReady(ctx)
		if n == 1 {
			return errors.New("long connection ended")
		}
		<-ctx.Done()
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx, ch, nil) }()
	wait := step.next(t)
	st, _ := sup.State("feishu")
	assert.Equal(t, PhaseRetrying, st.Phase)
	assert.Equal(t, 1, st.Attempts, "a connection that had worked starts the count again")
	wait <- time.Now()
	require.Eventually(t, func() bool { st, _ := sup.State("feishu"); return st.Phase == PhaseConnected }, 30*time.Second, time.Millisecond)
	cancel()
	<-done
}

type permanentErr struct{}

func (permanentErr) Error() string   { return "channel already started" }
func (permanentErr) Permanent() bool { return true }

func TestSupervisorFailedIsFinal(t *testing.T) {
	sup := NewSupervisor(SupervisorConfig{After: func(time.Duration) <-chan time.Time { t.Error("no retry expected"); return nil }})
	var panicked atomic.Bool
	ch := &scriptedChannel{name: "x", start: func(context.Context, int) error { return permanentErr{} }}
	sup.Run(context.Background(), ch, nil)
	st, _ := sup.State("x")
	assert.Equal(t, PhaseFailed, st.Phase)
	assert.True(t, strings.Contains(st.Reason, "already started"))

	// A panicking Start is a failed start, not a crash.
	step := newStepper()
	sup = NewSupervisor(SupervisorConfig{After: step.after})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	pch := &scriptedChannel{name: "p", start: func(context.Context, int) error { panicked.Store(true); panic("boom") }}
	go func() { defer close(done); sup.Run(ctx, pch, nil) }()
	step.next(t)
	st, _ = sup.State("p")
	assert.Equal(t, PhaseRetrying, st.Phase)
	assert.Contains(t, st.Reason, "panicked")
	cancel()
	<-done
	assert.True(t, panicked.Load())
}

// TestSupervisorMarkLost: a long connection that reports a lost connection while its Start keeps
// running shows as retrying with the reason explained and its attempt count, and as connected
// again on the next MarkReady; Start is not restarted for it.
func TestSupervisorMarkLost(t *testing.T) {
	sup := NewSupervisor(SupervisorConfig{})
	lost, back, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	ch := &scriptedChannel{name: "dingtalk", start: func(ctx context.Context, n int) error {
		MarkReady(ctx)
		<-lost
		MarkLost(ctx, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, 3)
		<-back
		MarkReady(ctx)
		<-release
		<-ctx.Done()
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx, ch, nil) }()
	phase := func() State { st, _ := sup.State("dingtalk"); return st }
	require.Eventually(t, func() bool { return phase().Phase == PhaseConnected }, 30*time.Second, time.Millisecond)
	close(lost)
	require.Eventually(t, func() bool { return phase().Phase == PhaseRetrying }, 30*time.Second, time.Millisecond)
	assert.Contains(t, phase().Reason, "connection refused")
	assert.Equal(t, 3, phase().Attempts)
	close(back)
	require.Eventually(t, func() bool { return phase().Phase == PhaseConnected }, 30*time.Second, time.Millisecond)
	assert.Zero(t, phase().Attempts)
	close(release)
	assert.Equal(t, int32(1), ch.starts.Load(), "Start was not restarted")
	cancel()
	<-done
}

package channels

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Phases of a channel, as /readyz and the metrics show them.
const (
	PhaseStarting  = "starting"  // Start is running and has not reported ready yet
	PhaseConnected = "connected" // ready: webhooks answer, the long connection is up
	PhaseRetrying  = "retrying"  // the last start failed; another attempt follows (Reason says why)
	PhaseFailed    = "failed"    // the last start failed in a way retrying cannot fix
)

// State is one channel's state.
type State struct {
	Channel  string    `json:"channel"`
	Phase    string    `json:"state"`
	Reason   string    `json:"reason,omitempty"`
	Since    time.Time `json:"since"`
	Attempts int       `json:"attempts,omitempty"` // consecutive failed starts
}

// readyKey carries the callbacks a blocking Start reports its connection through.
type readyKey struct{}

type readiness struct {
	ready func()
	lost  func(err error, attempts int)
}

// MarkReady tells the supervisor running ctx's Start that the channel is connected. Channels whose
// Start blocks while connected (long connections) call it, again after every reconnect; a Start
// that returns nil once ready needs not. Outside a supervisor it does nothing.
func MarkReady(ctx context.Context) {
	if r, ok := ctx.Value(readyKey{}).(*readiness); ok {
		r.ready()
	}
}

// MarkLost tells the supervisor that a long connection whose Start keeps running has lost its
// connection and is trying to get it back, attempts times so far: the channel shows as retrying,
// with err explained, until the next MarkReady. A long connection calls it once a reconnect has
// failed, not when the socket drops, so that a reconnect within a second does not flap /readyz.
func MarkLost(ctx context.Context, err error, attempts int) {
	if r, ok := ctx.Value(readyKey{}).(*readiness); ok {
		r.lost(err, attempts)
	}
}

// SupervisorConfig configures a Supervisor. Zero values take the defaults.
type SupervisorConfig struct {
	// Initial is the first retry delay (default 1 s); it doubles per consecutive failure up to Max
	// (default 2 min), and each delay is jittered in [d/2, d] so that restarted gateways do not
	// knock on the platform in step.
	Initial, Max time.Duration
	Now          func() time.Time
	// Rand returns a number in [0,1) for the jitter; default math/rand/v2.
	Rand func() float64
	// After waits; default time.After. Tests make it immediate.
	After  func(time.Duration) <-chan time.Time
	Logger *slog.Logger
}

// Supervisor keeps channels started: a Start that fails is retried with capped exponential backoff
// and jitter, and a long connection that ends is started again. It records each channel's state.
type Supervisor struct {
	cfg SupervisorConfig
	log *slog.Logger

	mu     sync.Mutex
	states map[string]State
}

// NewSupervisor returns a Supervisor.
func NewSupervisor(cfg SupervisorConfig) *Supervisor {
	if cfg.Initial <= 0 {
		cfg.Initial = time.Second
	}
	if cfg.Max <= 0 {
		cfg.Max = 2 * time.Minute
	}
	if cfg.Max < cfg.Initial {
		cfg.Max = cfg.Initial
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Supervisor{cfg: cfg, log: cfg.Logger, states: make(map[string]State)}
}

// Backoff is the delay after n consecutive failures (n ≥ 1).
func (s *Supervisor) Backoff(n int) time.Duration {
	return Backoff(s.cfg.Initial, s.cfg.Max, n, s.cfg.Rand)
}

// States returns every supervised channel's state, by name.
func (s *Supervisor) States() []State {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]State, 0, len(s.states))
	for _, st := range s.states {
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Channel < out[j].Channel })
	return out
}

// State returns one channel's state.
func (s *Supervisor) State(name string) (State, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[name]
	return st, ok
}

func (s *Supervisor) set(name, phase, reason string, attempts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.states[name]; ok && old.Phase == phase && old.Reason == reason && old.Attempts == attempts {
		return
	}
	s.states[name] = State{Channel: name, Phase: phase, Reason: reason, Since: s.cfg.Now(), Attempts: attempts}
}

// Register records ch as starting before Run begins, so /readyz lists it from the first moment.
func (s *Supervisor) Register(ch Channel) { s.set(ch.Name(), PhaseStarting, "", 0) }

// Run starts ch with h and keeps it started until ctx ends. A panic in Start is recovered and
// treated as a failed start.
func (s *Supervisor) Run(ctx context.Context, ch Channel, h Handler) {
	name := ch.Name()
	failures := 0
	for ctx.Err() == nil {
		if failures == 0 {
			s.set(name, PhaseStarting, "", 0)
		}
		var connected atomic.Bool
		ready := func() {
			if connected.Swap(true) {
				return
			}
			failures = 0
			s.set(name, PhaseConnected, "", 0)
			s.log.Info("channel connected", "channel", name)
		}
		lost := func(err error, attempts int) {
			connected.Store(false)
			why := Explain(err)
			s.set(name, PhaseRetrying, why, attempts)
			s.log.Warn("channel connection lost; reconnecting", "channel", name, "reason", why, "attempt", attempts)
		}
		err := s.start(context.WithValue(ctx, readyKey{}, &readiness{ready: ready, lost: lost}), ch, h)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			// Webhook channels return once ready and stay so until ctx ends.
			ready()
			<-ctx.Done()
			return
		}
		failures++
		why := Explain(err)
		if IsPermanent(err) {
			s.set(name, PhaseFailed, why, failures)
			s.log.Error("channel cannot start and will not be retried", "channel", name, "reason", why)
			return
		}
		d := s.Backoff(failures)
		s.set(name, PhaseRetrying, why, failures)
		s.log.Warn("channel could not start; retrying", "channel", name, "reason", why, "attempt", failures, "retry_in", d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.After(d):
		}
	}
}

func (s *Supervisor) start(ctx context.Context, ch Channel, h Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: start panicked: %v", ch.Name(), p)
		}
	}()
	return ch.Start(ctx, h)
}

// Explain says in plain words why a channel could not start: the platform is unreachable
// (connection refused, name not found, timeout), it rejected the credentials, or the configuration
// is wrong. The error text follows.
func Explain(err error) string {
	var cr interface{ CredentialsRejected() bool }
	var dns *net.DNSError
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.As(err, &cr) && cr.CredentialsRejected():
		return "the platform rejected the credentials (check app_id/app_secret or client_id/client_secret): " + err.Error()
	case errors.As(err, &dns):
		return "platform unreachable: cannot resolve " + dns.Name + " (check the base URL and DNS): " + err.Error()
	case errors.Is(err, syscall.ECONNREFUSED):
		return "platform unreachable: connection refused (check the base URL, proxy and firewall): " + err.Error()
	case errors.As(err, &ne) && ne.Timeout():
		return "platform unreachable: timed out (check the network and proxy): " + err.Error()
	case errors.As(err, &op):
		return "platform unreachable: network error: " + err.Error()
	default:
		return "the platform refused the start, or the configuration is wrong: " + err.Error()
	}
}

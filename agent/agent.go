package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// Store is the narrow persistence the loop needs; *store.Store satisfies it. It is defined here so
// that another store (e.g. PostgreSQL) can serve the agent without touching it.
//
// A run's end is one ConcludeRun: the final answer with its metadata (citations included), the
// terminal phase and the marker counts commit together, so no crash can separate them (DESIGN §4,
// atomic record).
//
// A turn makes three kinds of write, each one transaction: StartTurn (the USER message and the
// RUNNING run), AppendMessages once per tool round (the tool-calling message and its results) and
// ConcludeRun. The history window reads dialog lines, never whole messages.
type Store interface {
	StartTurn(ctx context.Context, m store.Message, r store.Run) (store.Message, store.Run, error)
	AppendMessages(ctx context.Context, ms []store.Message) ([]store.Message, error)
	ListDialogLinesBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]store.DialogLine, error)
	ConcludeRun(ctx context.Context, c store.Conclusion) (store.Run, store.Message, error)
}

// Limits of a Turn.
const (
	// MaxTurnBytes bounds the text of one user message.
	MaxTurnBytes = 32 << 10
	// MaxQueuedPerSession bounds how many turns may wait behind a session's running run, so one
	// chatty conversation cannot pile up unbounded work.
	MaxQueuedPerSession = 32
	// maxSessionIDLen bounds session ids; real ones are short random strings or channel keys.
	maxSessionIDLen = 256
	// maxHistoryMessages bounds how many earlier USER/ASSISTANT messages are resent to the model.
	maxHistoryMessages = 40
	// historyBudget bounds the characters (runes, markers stripped) of the earlier messages resent
	// to the model: the window holds the newest messages that fit, so a turn costs the same at
	// message 10 and at message 10,000 of a session.
	historyBudget = 12000
	// historyPage is how many dialog messages one store read fetches while filling the window.
	historyPage = maxHistoryMessages
)

// Errors returned by Submit, matched with errors.Is.
var (
	ErrClosed     = errors.New("agent is closed")
	ErrBadTurn    = errors.New("invalid turn")
	ErrQueueFull  = errors.New("too many messages waiting in this session")
	errToolRounds = errors.New("tool rounds exceeded")
)

// Config configures an Agent.
type Config struct {
	Store       Store
	Model       Model
	Tools       []Tool
	Hooks       []Hook        // completion hooks; they run after the run's record is committed
	MaxRounds   int           // model rounds per run, default 8
	ToolTimeout time.Duration // per tool call, default 30s
	HookTimeout time.Duration // per hook, default 10s
	Logger      *slog.Logger
	Now         func() time.Time
	Lang        string // "zh" (default) or "en": language of the system prompt and of run errors
	// Order, when set, keeps the turns of a session in order across the replicas of one database:
	// before a run starts, the worker waits (Order.WaitTurn) until no earlier turn of the session
	// runs or waits on another replica. Unset (one process, bbolt) nothing waits and nothing is
	// read; this agent's own queue orders a session's turns either way.
	Order TurnOrder
}

// TurnOrder holds a stored turn back while an earlier turn of its session runs elsewhere.
// WaitTurn returns nil once the run may start, or ctx's error when ctx ends first (Cancel, Close);
// it must not hold a database connection while it waits.
type TurnOrder interface {
	WaitTurn(ctx context.Context, sessionID, runID string) error
}

// Agent runs turns: one run at a time per session, in submission order, many sessions at once.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	hooks []Hook
	tools map[string]Tool
	specs []ToolSpec

	baseCtx    context.Context
	cancelBase context.CancelFunc
	wg         sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	sessions map[string]*sessionQueue
	// subs is replaced (under mu), never mutated, so emit, which runs for every chunk of every
	// answer, reads it without a lock.
	subs    atomic.Pointer[[]subscriber]
	nextSub int
}

type subscriber struct {
	id int
	fn Sink
}

// sessionQueue is the FIFO of one session; a worker goroutine exists while it is non-empty.
type sessionQueue struct {
	running *RunHandle
	pending []*RunHandle
}

// RunHandle follows one submitted turn.
type RunHandle struct {
	ID        string
	SessionID string

	turn    Turn
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	outcome Outcome
}

// Done is closed when the run has finished (run.finished has been emitted).
func (h *RunHandle) Done() <-chan struct{} { return h.done }

// Outcome is the result of the run; valid after Done is closed.
func (h *RunHandle) Outcome() Outcome {
	select {
	case <-h.done:
		return h.outcome
	default:
		return Outcome{Phase: store.PhaseRunning}
	}
}

// Outcome is the result of one run.
type Outcome struct {
	Phase          store.Phase
	Error          string
	UserMessageID  uint64
	FinalMessageID uint64
	Content        string               // final raw content (markers kept)
	Citations      []citations.Citation // verified, n order; empty unless COMPLETED with valid markers
	LinksHidden    int                  // URLs of the final answer hidden by the link rule
}

// New checks cfg, fills defaults and returns an Agent ready to take turns.
func New(cfg Config) (*Agent, error) {
	if cfg.Store == nil {
		return nil, errors.New("agent: config needs a Store")
	}
	if cfg.Model == nil {
		return nil, errors.New("agent: config needs a Model")
	}
	switch cfg.Lang {
	case "":
		cfg.Lang = "zh"
	case "zh", "en":
	default:
		return nil, fmt.Errorf("agent: unknown language %q (want zh or en)", cfg.Lang)
	}
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = 8
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = 30 * time.Second
	}
	if cfg.HookTimeout <= 0 {
		cfg.HookTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Agent{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "agent"),
		tools:    make(map[string]Tool, len(cfg.Tools)),
		sessions: make(map[string]*sessionQueue),
	}
	for i, t := range cfg.Tools {
		if t == nil {
			return nil, fmt.Errorf("agent: tool %d is nil", i)
		}
		spec := t.Spec()
		if spec.Name == "" {
			return nil, fmt.Errorf("agent: tool %d has no name", i)
		}
		if _, dup := a.tools[spec.Name]; dup {
			return nil, fmt.Errorf("agent: duplicate tool %q", spec.Name)
		}
		if len(spec.Parameters) > 0 {
			var schema map[string]any
			if err := json.Unmarshal(spec.Parameters, &schema); err != nil || schema == nil {
				return nil, fmt.Errorf("agent: tool %q: parameters must be a JSON Schema object", spec.Name)
			}
		}
		a.tools[spec.Name] = t
		a.specs = append(a.specs, spec)
	}
	for i, h := range cfg.Hooks {
		if h == nil {
			return nil, fmt.Errorf("agent: hook %d is nil", i)
		}
	}
	a.hooks = slices.Clone(cfg.Hooks)
	a.baseCtx, a.cancelBase = context.WithCancel(context.Background())
	return a, nil
}

// ModelName is the name of the model shown to users.
func (a *Agent) ModelName() string { return a.cfg.Model.Name() }

// Submit validates t, assigns the run id and enqueues the run behind the session's earlier turns.
// ctx bounds only the enqueue; the run itself lives until it ends, Cancel or Close.
func (a *Agent) Submit(ctx context.Context, t Turn) (*RunHandle, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("agent: submit: %w", err)
	}
	if err := validateTurn(t); err != nil {
		return nil, err
	}
	id := t.RunID
	if !t.Stored() {
		var err error
		if id, err = newRunID(); err != nil {
			return nil, fmt.Errorf("agent: submit: %w", err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("agent: submit: %w", ErrClosed)
	}
	q := a.sessions[t.SessionID]
	if q != nil && len(q.pending) >= MaxQueuedPerSession {
		return nil, fmt.Errorf("agent: submit: %w (limit %d)", ErrQueueFull, MaxQueuedPerSession)
	}
	h := &RunHandle{ID: id, SessionID: t.SessionID, turn: t, done: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(a.baseCtx)
	if q == nil {
		q = &sessionQueue{}
		a.sessions[t.SessionID] = q
		q.pending = append(q.pending, h)
		a.wg.Add(1)
		go a.worker(t.SessionID, q)
		return h, nil
	}
	q.pending = append(q.pending, h)
	return h, nil
}

func validateTurn(t Turn) error {
	switch {
	case t.SessionID == "":
		return fmt.Errorf("agent: %w: missing session id", ErrBadTurn)
	case len(t.SessionID) > maxSessionIDLen:
		return fmt.Errorf("agent: %w: session id longer than %d bytes", ErrBadTurn, maxSessionIDLen)
	case strings.TrimSpace(t.Text) == "":
		return fmt.Errorf("agent: %w: empty message", ErrBadTurn)
	case len(t.Text) > MaxTurnBytes:
		return fmt.Errorf("agent: %w: message is %d bytes, the limit is %d", ErrBadTurn, len(t.Text), MaxTurnBytes)
	case !utf8.ValidString(t.Text):
		return fmt.Errorf("agent: %w: message is not valid UTF-8", ErrBadTurn)
	case t.Stored() && t.RunID == "":
		return fmt.Errorf("agent: %w: a stored turn needs its run id", ErrBadTurn)
	case !t.Stored() && t.RunID != "":
		return fmt.Errorf("agent: %w: a run id is only given with its stored user message", ErrBadTurn)
	case t.Stored() && len(t.Metadata) > 0:
		return fmt.Errorf("agent: %w: a stored turn's metadata is stored with its user message", ErrBadTurn)
	case len(t.Metadata) > 0 && !isJSONObject(t.Metadata):
		return fmt.Errorf("agent: %w: metadata is not a JSON object", ErrBadTurn)
	}
	return nil
}

func newRunID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// worker runs the session's queued turns one after the other and exits when the queue is empty.
func (a *Agent) worker(sessionID string, q *sessionQueue) {
	defer a.wg.Done()
	for {
		a.mu.Lock()
		if len(q.pending) == 0 {
			q.running = nil
			delete(a.sessions, sessionID)
			a.mu.Unlock()
			return
		}
		h := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		a.mu.Unlock()

		if a.cfg.Order != nil {
			a.awaitTurn(h)
		}
		a.mu.Lock()
		q.running = h
		a.mu.Unlock()
		h.outcome = a.execute(h)
		h.cancel()
		// The run is no longer the session's running one before anyone learns it is done, so a
		// Cancel after Done reports false.
		a.mu.Lock()
		q.running = nil
		a.mu.Unlock()
		close(h.done)
	}
}

// awaitTurn stores a turn the caller did not store (its USER message and RUNNING run: its place
// in the session's order) and waits until no earlier turn of the session runs on another replica.
// While it waits the turn is not the session's running run here, so /stop and chat.cancel reach
// the run that is actually answering, wherever it is. Cancel of the run itself cannot reach it
// yet; Close ends the wait and the run then ends CANCELLED, as a queued turn does. When storing
// fails the turn is left to execute, which stores it (or reports why not) as without Order.
func (a *Agent) awaitTurn(h *RunHandle) {
	defer func() {
		// Like execute, the worker never dies of a bug: the run goes on and execute concludes it.
		if r := recover(); r != nil {
			a.log.Error("waiting for the session's earlier turns panicked; the run starts", "run", h.ID, "session", h.SessionID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	if !h.turn.Stored() {
		rs := &runState{a: a, h: h, pctx: context.WithoutCancel(h.ctx)}
		if err := rs.startTurn(); err != nil {
			a.log.Warn("could not store the turn before waiting for its session's earlier turns", "run", h.ID, "session", h.SessionID, "err", err)
			return
		}
		h.turn.UserMessageID, h.turn.RunID = rs.out.UserMessageID, h.ID
	}
	if err := a.cfg.Order.WaitTurn(h.ctx, h.SessionID, h.ID); err != nil && h.ctx.Err() == nil {
		a.log.Warn("waiting for the session's earlier turns failed; the run starts", "run", h.ID, "session", h.SessionID, "err", err)
	}
}

// Cancel cancels the session's running run. It reports false when the session has none.
func (a *Agent) Cancel(sessionID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.sessions[sessionID]
	if q == nil || q.running == nil {
		return false
	}
	q.running.cancel()
	return true
}

// Subscribe registers fn for every event of every run. fn is called synchronously in the run's
// goroutine and must not block; a panic in fn is recovered and logged.
func (a *Agent) Subscribe(fn Sink) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	a.mu.Lock()
	id := a.nextSub
	a.nextSub++
	subs := append(slices.Clip(a.subscribers()), subscriber{id: id, fn: fn})
	a.subs.Store(&subs)
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			subs := slices.DeleteFunc(slices.Clone(a.subscribers()), func(s subscriber) bool { return s.id == id })
			a.subs.Store(&subs)
			a.mu.Unlock()
		})
	}
}

// Close refuses new turns, cancels running and queued ones and waits for them to finish (their
// phases persisted, run.finished emitted), bounded by ctx.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.cancelBase()
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("agent: close: runs still finishing: %w", ctx.Err())
	}
}

// emit delivers ev to the turn's sink and to every subscriber, isolating their panics.
func (a *Agent) emit(h *RunHandle, ev Event) {
	ev.SessionID = h.SessionID
	ev.RunID = h.ID
	ev.Channel = h.turn.Channel
	ev.At = a.cfg.Now()
	if h.turn.Sink != nil {
		a.deliver(h.turn.Sink, ev)
	}
	for _, s := range a.subscribers() {
		a.deliver(s.fn, ev)
	}
}

// subscribers is the current list of subscribers.
func (a *Agent) subscribers() []subscriber {
	if p := a.subs.Load(); p != nil {
		return *p
	}
	return nil
}

func (a *Agent) deliver(s Sink, ev Event) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("event sink panicked", "event", ev.Type, "run", ev.RunID, "panic", fmt.Sprint(r))
		}
	}()
	s(ev)
}

// isJSONObject reports whether raw is one valid JSON object.
func isJSONObject(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// Package testkit assembles the real offline stack (bbolt store, agent loop, bundled corpus, channel
// dispatcher) for end-to-end tests of channels and the gateway, plus a scripted Model for tests that
// need exact answer text and chunking.
package testkit

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

// StackOptions configures NewStack.
type StackOptions struct {
	Model         agent.Model // nil → extractive.New()
	SourcesFooter bool
	PublicURL     string // default "http://127.0.0.1:8080"
	// NoShareURL starts the dispatcher as serve does when --public-url is not set: /share then
	// says that sharing needs it.
	NoShareURL bool
	Logger     *slog.Logger
}

// Stack is a running offline citegate core.
type Stack struct {
	Store      *store.Store
	Agent      *agent.Agent
	Dispatcher *gateway.Dispatcher
	Corpus     *tools.Corpus
	DataPath   string

	opt StackOptions
}

// NewStack opens a store on t.TempDir() and starts the agent and the dispatcher; everything is closed
// when the test ends.
func NewStack(t testing.TB, opt StackOptions) *Stack {
	t.Helper()
	if opt.PublicURL == "" {
		opt.PublicURL = "http://127.0.0.1:8080"
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	corpus, err := bundledCorpus(opt.PublicURL)
	if err != nil {
		t.Fatalf("testkit: load corpus: %v", err)
	}
	s := &Stack{Corpus: corpus, DataPath: filepath.Join(t.TempDir(), "citegate.db"), opt: opt}
	s.start(t)
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *Stack) start(t testing.TB) {
	t.Helper()
	st, err := store.Open(s.DataPath, store.Options{Logger: s.opt.Logger})
	if err != nil {
		t.Fatalf("testkit: open store: %v", err)
	}
	model := s.opt.Model
	if model == nil {
		model = extractive.New()
	}
	ag, err := agent.New(agent.Config{
		Store:  st,
		Model:  model,
		Tools:  []agent.Tool{tools.NewWebSearch(s.Corpus, nil)},
		Logger: s.opt.Logger,
	})
	if err != nil {
		t.Fatalf("testkit: new agent: %v", err)
	}
	s.Store, s.Agent = st, ag
	shareURL := s.opt.PublicURL
	if s.opt.NoShareURL {
		shareURL = ""
	}
	d, err := gateway.NewDispatcher(gateway.DispatcherConfig{
		Store: st, Agent: ag, PublicURL: shareURL, SourcesFooter: s.opt.SourcesFooter, Logger: s.opt.Logger,
	})
	if err != nil {
		t.Fatalf("testkit: new dispatcher: %v", err)
	}
	s.Dispatcher = d
}

func (s *Stack) stop(t testing.TB) {
	if s.Store == nil {
		return
	}
	// The same shutdown order as serve.
	if err := gateway.Shutdown(context.Background(), s.Agent, s.Dispatcher); err != nil {
		t.Errorf("testkit: shutdown: %v", err)
	}
	if err := s.Store.Close(); err != nil {
		t.Errorf("testkit: close store: %v", err)
	}
	s.Store = nil
}

// Restart closes the store, agent and dispatcher and opens them again on the same file, as a process
// restart would. Channels must be given the new Dispatcher's Handler.
func (s *Stack) Restart(t testing.TB) {
	t.Helper()
	s.stop(t)
	s.start(t)
}

// Wait waits until every reply in flight has finished.
func (s *Stack) Wait(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Dispatcher.Wait(ctx); err != nil {
		t.Fatalf("testkit: wait for replies: %v", err)
	}
}

var (
	corpusMu    sync.Mutex
	corpusCache = map[string]*tools.Corpus{}
)

// bundledCorpus loads the bundled corpus once per public URL and process: building its index is the
// slowest part of a stack, and a loaded corpus is read-only.
func bundledCorpus(publicURL string) (*tools.Corpus, error) {
	corpusMu.Lock()
	defer corpusMu.Unlock()
	if c, ok := corpusCache[publicURL]; ok {
		return c, nil
	}
	c, err := tools.LoadCorpus("", publicURL)
	if err != nil {
		return nil, err
	}
	corpusCache[publicURL] = c
	return c, nil
}

// ScriptedModel is a Model for tests: the first round of a run calls web_search with the user's
// question; the next round streams Answer split into chunks of the given sizes in runes (cycled).
type ScriptedModel struct {
	Answer string
	Chunks []int
	// Delay between chunks, to let tests act mid-stream (e.g. /stop).
	Delay time.Duration

	mu    sync.Mutex
	calls int
}

// NewScriptedModel returns a ScriptedModel.
func NewScriptedModel(answer string, chunks []int) *ScriptedModel {
	return &ScriptedModel{Answer: answer, Chunks: chunks}
}

// Name implements agent.Model.
func (m *ScriptedModel) Name() string { return "scripted" }

// Calls reports how many rounds the model has served.
func (m *ScriptedModel) Calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// Generate implements agent.Model.
func (m *ScriptedModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	last, toolsSince := "", false
	for _, msg := range req.Messages {
		switch msg.Role {
		case "user":
			last, toolsSince = msg.Content, false
		case "tool":
			toolsSince = true
		}
	}
	if !toolsSince {
		args, _ := json.Marshal(map[string]string{"query": last})
		return agent.ModelResponse{ToolCalls: []store.ToolCall{{ID: "call_1", Name: "web_search", Arguments: string(args)}}}, nil
	}
	sizes := m.Chunks
	if len(sizes) == 0 {
		sizes = []int{4}
	}
	// Chunk by runes: real models stream whole characters.
	runes := []rune(m.Answer)
	for i, k := 0, 0; i < len(runes); k++ {
		n := max(sizes[k%len(sizes)], 1)
		end := min(i+n, len(runes))
		onDelta(string(runes[i:end]))
		i = end
		if m.Delay > 0 {
			select {
			case <-ctx.Done():
				return agent.ModelResponse{Text: string(runes[:end])}, ctx.Err()
			case <-time.After(m.Delay):
			}
		}
	}
	return agent.ModelResponse{Text: m.Answer}, nil
}

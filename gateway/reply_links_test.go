package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

// countingStore counts the reads a reply pump could make of a run's messages.
type countingStore struct {
	*store.Store
	listRun atomic.Int32
}

func (s *countingStore) ListRunMessages(ctx context.Context, runID string) ([]store.Message, error) {
	s.listRun.Add(1)
	return s.Store.ListRunMessages(ctx, runID)
}

// roundsModel calls the tool "fetch" rounds times (with a little text each time), then streams answer in chunks of 6 bytes'
// worth of runes with a pause between them, so the pump sends updates mid-stream.
type roundsModel struct {
	rounds int
	answer string
}

func (m *roundsModel) Name() string { return "rounds" }

func (m *roundsModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	n := 0
	for _, msg := range req.Messages {
		if msg.Role == "tool" {
			n++
		}
	}
	if n < m.rounds {
		// Text in every tool round: the pump has a delta to make safe after each round.
		onDelta("查询中。")
		id := "call_" + string(rune('a'+n))
		return agent.ModelResponse{ToolCalls: []store.ToolCall{{ID: id, Name: "fetch", Arguments: `{"n":` + string(rune('0'+n)) + `}`}}}, nil
	}
	runes := []rune(m.answer)
	for i := 0; i < len(runes); i += 6 {
		onDelta(string(runes[i:min(i+6, len(runes))]))
		select {
		case <-ctx.Done():
			return agent.ModelResponse{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return agent.ModelResponse{Text: m.answer}, nil
}

// fetchTool answers round n with a JSON document whose URL is written with JSON escapes, so only a
// reading of the decoded JSON finds it.
type fetchTool struct{}

func (fetchTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "fetch", Description: "test", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (fetchTool) Call(_ context.Context, args string) (string, error) {
	var a struct{ N int }
	_ = json.Unmarshal([]byte(args), &a)
	return `{"items":[{"link":"https:\/\/tool` + string(rune('0'+a.N)) + `.example\/p?a=1\u0026b=2"}]}`, nil
}

// TestPumpTakesLinksFromTheAgent: a chat reply streams URLs of every tool round and of the user's
// message while hiding one nobody retrieved, and the pump never reads the run's messages back
// from the store to learn them (the agent's events carry the run's allow set).
func TestPumpTakesLinksFromTheAgent(t *testing.T) {
	raw, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	st := &countingStore{Store: raw}
	answer := "第一个 https://tool0.example/p?a=1&b=2 第二个 https://tool1.example/p?a=1&b=2 第三个 https://tool2.example/p?a=1&b=2 " +
		"您给的 https://user.example.org/page 编的 https://evil.example.net/x 完。"
	ag, err := agent.New(agent.Config{Store: st, Model: &roundsModel{rounds: 3, answer: answer}, Tools: []agent.Tool{fetchTool{}},
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	d, err := gateway.NewDispatcher(gateway.DispatcherConfig{Store: st, Agent: ag, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = gateway.Shutdown(context.Background(), ag, d) })

	ch := &recChannel{rate: 1000}
	d.Handler(ch).HandleMessage(context.Background(), msg("p1", "请看 https://user.example.org/page"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, d.Wait(ctx))

	// The pump of the earlier code read them once per round that streamed text after new results (4).
	assert.Zero(t, st.listRun.Load(), "the pump read the run's messages from the store")
	replies, _ := ch.snapshot()
	require.Len(t, replies, 1)
	ops := replies[0]
	var updates []string
	for _, o := range ops {
		assert.NotContains(t, o.text, "evil.example", "%s %q", o.kind, o.text)
		if o.kind == "update" {
			updates = append(updates, o.text)
		}
	}
	require.NotEmpty(t, updates)
	streamed := updates[len(updates)-1]
	for _, u := range []string{"https://tool0.example/p?a=1&b=2", "https://tool1.example/p?a=1&b=2", "https://tool2.example/p?a=1&b=2", "https://user.example.org/page"} {
		assert.Contains(t, streamed, u, "streamed before the final text")
	}
	last := ops[len(ops)-1]
	require.Equal(t, "finish", last.kind)
	// The final text is the last round's (the answer), made safe.
	want := strings.Replace(answer, "https://evil.example.net/x", citations.HiddenLinkNotice, 1)
	assert.Equal(t, want, last.text)
}

// TestPumpLinksUnderRace: many chat runs with tool rounds at once, so that the race detector
// sees the agent's run goroutines grow their link sets while the pumps read the snapshots.
func TestPumpLinksUnderRace(t *testing.T) {
	raw, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	answer := "见 https://tool0.example/p?a=1&b=2 与 https://tool1.example/p?a=1&b=2 。"
	ag, err := agent.New(agent.Config{Store: raw, Model: &roundsModel{rounds: 2, answer: answer}, Tools: []agent.Tool{fetchTool{}},
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	d, err := gateway.NewDispatcher(gateway.DispatcherConfig{Store: raw, Agent: ag, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = gateway.Shutdown(context.Background(), ag, d) })
	ch := &recChannel{rate: 1000}
	h := d.Handler(ch)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := msg("r"+string(rune('a'+i)), "问题")
			m.ConversationID = "conv-r" + string(rune('a'+i))
			h.HandleMessage(context.Background(), m)
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, d.Wait(ctx))
	replies, _ := ch.snapshot()
	require.Len(t, replies, 8)
	for _, ops := range replies {
		require.NotEmpty(t, ops)
		assert.Equal(t, answer, ops[len(ops)-1].text)
	}
}

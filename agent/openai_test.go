package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

func TestOpenAIAssemblesToolCalls(t *testing.T) {
	// A compatible server that repeats the whole name in every chunk, omits ids and skips index 1.
	chunks := []string{
		chunk(map[string]any{"role": "assistant", "content": "查"}, nil),
		chunk(map[string]any{"content": "一下"}, nil),
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"name": "web_search", "arguments": `{"query":`}}}}, nil),
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 2, "id": "call_z", "function": map[string]any{"name": "open_", "arguments": ""}}}}, nil),
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"name": "web_search", "arguments": `"发票"}`}}}}, nil),
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 2, "function": map[string]any{"name": "web_page", "arguments": `{"url":"https://a.example/"}`}}}}, nil),
		chunk(map[string]any{}, "tool_calls"),
	}
	llm := newFakeLLM(t, reply{chunks: chunks})
	var deltas []string
	resp, err := llm.model(t).Generate(context.Background(), ModelRequest{Messages: []ChatMessage{{Role: "user", Content: "hi"}}}, func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err)
	assert.Equal(t, "查一下", resp.Text)
	assert.Equal(t, []string{"查", "一下"}, deltas)
	assert.Equal(t, []store.ToolCall{
		{ID: "call_1", Name: "web_search", Arguments: `{"query":"发票"}`},
		{ID: "call_z", Name: "open_web_page", Arguments: `{"url":"https://a.example/"}`},
	}, resp.ToolCalls)
}

func TestOpenAIRequestShape(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1") // must be ignored: cmd owns configuration
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	llm := newFakeLLM(t, textStream("好"), textStream("好"))
	req := ModelRequest{
		Messages: []ChatMessage{
			{Role: "system", Content: "sys"},
			{Role: "user", Content: "q"},
			{Role: "assistant", ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"q"}`}}},
			{Role: "tool", ToolCallID: "c1", Name: "web_search", Content: `{"results":[],"ref":1}`},
		},
		Tools: []ToolSpec{{Name: "web_search", Description: "搜索", Parameters: []byte(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)}},
	}
	_, err := llm.model(t).Generate(context.Background(), req, func(string) {})
	require.NoError(t, err)

	body := llm.request(0)
	assert.Equal(t, true, body["stream"])
	assert.Equal(t, "test-model", body["model"])
	msgs := llm.messages(0)
	require.Len(t, msgs, 4)
	assert.Equal(t, []any{"system", "user", "assistant", "tool"}, []any{msgs[0]["role"], msgs[1]["role"], msgs[2]["role"], msgs[3]["role"]})
	tc := msgs[2]["tool_calls"].([]any)[0].(map[string]any)
	assert.Equal(t, "c1", tc["id"])
	assert.Equal(t, "function", tc["type"])
	assert.Equal(t, "c1", msgs[3]["tool_call_id"])
	tools := body["tools"].([]any)
	require.Len(t, tools, 1)
	fn := tools[0].(map[string]any)["function"].(map[string]any)
	assert.Equal(t, "web_search", fn["name"])
	assert.Equal(t, "搜索", fn["description"])
	assert.Equal(t, []any{"query"}, fn["parameters"].(map[string]any)["required"])

	h := llm.headers[0]
	assert.Equal(t, "Bearer sk-test-secret", h.Get("Authorization"))
	assert.Empty(t, h.Get("OpenAI-Organization"))

	// Without a key no Authorization header is sent (local servers).
	m, err := NewOpenAI(OpenAIConfig{BaseURL: llm.srv.URL + "/v1", Model: "local"})
	require.NoError(t, err)
	_, err = m.Generate(context.Background(), ModelRequest{Messages: []ChatMessage{{Role: "user", Content: "q"}}}, func(string) {})
	require.NoError(t, err)
	assert.Empty(t, llm.headers[1].Get("Authorization"))
	assert.Equal(t, "local", m.Name())
}

func TestOpenAIBackoffHonoursContext(t *testing.T) {
	llm := newFakeLLM(t, reply{status: 503, retryAfter: "30", body: `{"error":{"message":"busy"}}`})
	m := llm.model(t)
	m.(*openAIModel).maxBackoff = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Generate(ctx, ModelRequest{Messages: []ChatMessage{{Role: "user", Content: "q"}}}, func(string) {})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, 1, llm.requestCount())
}

func TestNewOpenAIValidation(t *testing.T) {
	for _, cfg := range []OpenAIConfig{
		{Model: "m"},
		{BaseURL: "ftp://x/v1", Model: "m"},
		{BaseURL: "not a url", Model: "m"},
		{BaseURL: "http://127.0.0.1:1/v1"},
	} {
		_, err := NewOpenAI(cfg)
		require.Error(t, err, "%+v", cfg)
		assert.True(t, strings.HasPrefix(err.Error(), "agent: openai:"))
	}
}

func TestOpenAISecretNotLogged(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	llm := newFakeLLM(t,
		reply{status: 429, body: `{"error":{"message":"slow down"}}`},
		reply{status: 401, body: `{"error":{"message":"Incorrect API key provided: sk-test-secret"}}`},
	)
	m, err := NewOpenAI(OpenAIConfig{BaseURL: llm.srv.URL + "/v1", Model: "m", APIKey: "sk-test-secret", Logger: logger})
	require.NoError(t, err)
	m.(*openAIModel).backoff = time.Millisecond
	st := openStore(t)
	sid := newSession(t, st)
	a := newAgent(t, Config{Store: st, Model: m, Logger: logger})
	out := run(t, a, sid, "q", nil)
	assert.Equal(t, store.PhaseFailed, out.Phase)
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, logs.String(), "retrying")
	assert.NotContains(t, logs.String(), "sk-test-secret")
	assert.NotContains(t, out.Error, "sk-test-secret")
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

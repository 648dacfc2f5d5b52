package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/citegate/citegate/store"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// OpenAIConfig configures an OpenAI-compatible chat completions model.
type OpenAIConfig struct {
	BaseURL    string // e.g. https://api.openai.com/v1 or a local server's /v1
	Model      string
	APIKey     string // optional for local servers; never logged
	HTTPClient *http.Client
	MaxRetries int // retries on 429/5xx before the first token; default 2, negative means none
	Logger     *slog.Logger
}

// openAIModel streams chat completions with tools. It retries by itself (the SDK's retries are off)
// because only a request that has produced no token yet may be repeated: a retry after tokens would
// show the user text twice.
type openAIModel struct {
	svc        openai.ChatCompletionService
	model      string
	apiKey     string // only to redact it from error messages
	maxRetries int
	log        *slog.Logger
	// backoff is the first retry delay, doubled per attempt; tests shorten it.
	backoff    time.Duration
	maxBackoff time.Duration
}

// NewOpenAI returns a Model that talks to an OpenAI-compatible /chat/completions endpoint.
func NewOpenAI(cfg OpenAIConfig) (Model, error) {
	base := strings.TrimSpace(cfg.BaseURL)
	u, err := url.Parse(base)
	if base == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("agent: openai: base URL %q is not an absolute http(s) URL", cfg.BaseURL)
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("agent: openai: model name is required")
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = 2
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Streams may run for minutes, so there is no overall client timeout; a server that does
		// not even send headers is given up on.
		tr.ResponseHeaderTimeout = 2 * time.Minute
		hc = &http.Client{Transport: tr}
	}
	// The service is built from explicit options only (not openai.NewClient), so no OPENAI_*
	// environment variable can redirect requests or add credentials: cmd owns configuration.
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &openAIModel{
		svc:        openai.NewChatCompletionService(opts...),
		model:      cfg.Model,
		apiKey:     cfg.APIKey,
		maxRetries: cfg.MaxRetries,
		log:        cfg.Logger.With("model", cfg.Model),
		backoff:    500 * time.Millisecond,
		maxBackoff: 10 * time.Second,
	}, nil
}

// Name implements Model.
func (m *openAIModel) Name() string { return m.model }

// Generate implements Model: one streamed chat completion, tool-call deltas assembled by index.
func (m *openAIModel) Generate(ctx context.Context, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
	params, err := m.params(req)
	if err != nil {
		return ModelResponse{}, err
	}
	for attempt := 0; ; attempt++ {
		resp, status, retryAfter, tokens, err := m.stream(ctx, params, onDelta)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return resp, fmt.Errorf("chat completions: %w", ctx.Err())
		}
		if tokens || !retryable(status) || attempt >= m.maxRetries {
			return resp, err
		}
		wait := min(m.backoff<<attempt, m.maxBackoff)
		if retryAfter > 0 {
			wait = min(retryAfter, m.maxBackoff)
		}
		m.log.Warn("chat completions: retrying", "status", status, "attempt", attempt+1, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ModelResponse{}, fmt.Errorf("chat completions: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func retryable(status int) bool { return status == http.StatusTooManyRequests || status >= 500 }

type toolCallBuilder struct {
	id, name string
	args     strings.Builder
}

// stream makes one request. It reports the HTTP status (0 when none arrived), the server's
// Retry-After, and whether any token (text or tool call) was received.
func (m *openAIModel) stream(ctx context.Context, params openai.ChatCompletionNewParams, onDelta func(string)) (resp ModelResponse, status int, retryAfter time.Duration, tokens bool, err error) {
	var statusSeen atomic.Int64
	var retryAfterSeen atomic.Int64
	// The middleware sees the HTTP status even when the error body is not JSON (the SDK then returns
	// a decoding error instead of an *openai.Error).
	record := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if res != nil {
			statusSeen.Store(int64(res.StatusCode))
			retryAfterSeen.Store(int64(parseRetryAfter(res.Header.Get("Retry-After"))))
		}
		return res, err
	})
	s := m.svc.NewStreaming(ctx, params, record)
	defer s.Close()

	var text strings.Builder
	var calls []*toolCallBuilder
	finish := ""
	for s.Next() {
		chunk := s.Current()
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			if d := ch.Delta.Content; d != "" {
				tokens = true
				text.WriteString(d)
				onDelta(d)
			}
			for _, tc := range ch.Delta.ToolCalls {
				tokens = true
				idx := int(tc.Index)
				if idx < 0 || idx > 127 {
					return ModelResponse{}, int(statusSeen.Load()), 0, true, fmt.Errorf("chat completions: tool call index %d out of range", idx)
				}
				for len(calls) <= idx {
					calls = append(calls, &toolCallBuilder{})
				}
				b := calls[idx]
				if tc.ID != "" {
					b.id = tc.ID
				}
				// Names arrive once in OpenAI's streams; some compatible servers repeat the whole
				// name in every chunk, which must not double it.
				if n := tc.Function.Name; n != "" && n != b.name {
					b.name += n
				}
				b.args.WriteString(tc.Function.Arguments)
			}
		}
	}
	resp.Text = text.String()
	for i, b := range calls {
		if b.name == "" && b.id == "" && b.args.Len() == 0 {
			continue // an index the server skipped
		}
		id := b.id
		if id == "" {
			id = "call_" + strconv.Itoa(i+1)
		}
		resp.ToolCalls = append(resp.ToolCalls, store.ToolCall{ID: id, Name: b.name, Arguments: b.args.String()})
	}
	status = int(statusSeen.Load())
	retryAfter = time.Duration(retryAfterSeen.Load())
	if err := s.Err(); err != nil {
		return resp, status, retryAfter, tokens, m.describeError(err, status)
	}
	if status >= 400 {
		return resp, status, retryAfter, tokens, fmt.Errorf("chat completions: %d %s", status, http.StatusText(status))
	}
	switch finish {
	case "":
		// The SDK cannot tell a stream cut short from one that ended without [DONE]; a missing
		// finish_reason is the hint worth logging.
		m.log.Warn("chat completions: stream ended without a finish reason", "text_bytes", len(resp.Text), "tool_calls", len(resp.ToolCalls))
	case "length", "content_filter":
		m.log.Warn("chat completions: answer cut short", "finish_reason", finish)
	}
	return resp, status, retryAfter, tokens, nil
}

// secretLike matches API keys some servers echo back in error messages.
var secretLike = regexp.MustCompile(`(sk|key)-[A-Za-z0-9_\-*]{6,}`)

// describeError turns an SDK error into "chat completions: 429 Too Many Requests: <message>". The
// message comes from the server and may echo the key; it is redacted, since it reaches users and logs.
func (m *openAIModel) describeError(err error, status int) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if m.apiKey != "" {
			msg = strings.ReplaceAll(msg, m.apiKey, "***")
		}
		msg = shorten(secretLike.ReplaceAllString(msg, "***"), 200)
		code := apiErr.StatusCode
		if msg == "" {
			return fmt.Errorf("chat completions: %d %s", code, http.StatusText(code))
		}
		return fmt.Errorf("chat completions: %d %s: %s", code, http.StatusText(code), msg)
	}
	if status >= 400 {
		return fmt.Errorf("chat completions: %d %s", status, http.StatusText(status))
	}
	return fmt.Errorf("chat completions: %w", err)
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// parseRetryAfter reads a Retry-After header in seconds (the HTTP-date form is rare for APIs and
// ignored).
func parseRetryAfter(v string) time.Duration {
	secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || secs <= 0 || secs > 3600 {
		return 0
	}
	return time.Duration(secs * float64(time.Second))
}

// params converts a ModelRequest into chat completion parameters.
func (m *openAIModel) params(req ModelRequest) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(m.model)}
	for _, msg := range req.Messages {
		switch msg.Role {
		case "system":
			p.Messages = append(p.Messages, openai.SystemMessage(msg.Content))
		case "user":
			p.Messages = append(p.Messages, openai.UserMessage(msg.Content))
		case "assistant":
			var am openai.ChatCompletionAssistantMessageParam
			if msg.Content != "" || len(msg.ToolCalls) == 0 {
				am.Content.OfString = openai.String(msg.Content)
			}
			for _, tc := range msg.ToolCalls {
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &am})
		case "tool":
			p.Messages = append(p.Messages, openai.ToolMessage(msg.Content, msg.ToolCallID))
		default:
			return p, fmt.Errorf("chat completions: unknown message role %q", msg.Role)
		}
	}
	for _, t := range req.Tools {
		def := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		if len(t.Parameters) > 0 {
			var schema map[string]any
			if err := json.Unmarshal(t.Parameters, &schema); err != nil {
				return p, fmt.Errorf("chat completions: tool %q parameters: %w", t.Name, err)
			}
			def.Parameters = schema
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
	}
	return p, nil
}

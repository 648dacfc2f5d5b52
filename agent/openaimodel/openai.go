// Package openaimodel is the llm.Model of any OpenAI-compatible chat completions endpoint (OpenAI,
// DeepSeek, Qwen, vLLM, Ollama, …) through openai-go, streaming text and tool calls.
package openaimodel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/citegate/citegate/agent/llm"
	"github.com/citegate/citegate/store"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// Config configures an OpenAI-compatible chat completions model.
type Config struct {
	BaseURL    string // e.g. https://api.openai.com/v1 or a local server's /v1
	Model      string
	APIKey     string // optional for local servers; never logged
	HTTPClient *http.Client
	MaxRetries int // retries on 429/5xx before the first token; default 2, negative means none
	// Backoff is the first retry delay, doubled per attempt up to MaxBackoff; defaults 500 ms and
	// 10 s (tests shorten the one and lengthen the other).
	Backoff    time.Duration
	MaxBackoff time.Duration
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
	// backoff is the first retry delay, doubled per attempt up to maxBackoff.
	backoff    time.Duration
	maxBackoff time.Duration
}

// New returns a Model that talks to an OpenAI-compatible /chat/completions endpoint.
func New(cfg Config) (llm.Model, error) {
	base := strings.TrimSpace(cfg.BaseURL)
	u, err := url.Parse(base)
	if base == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openaimodel: base URL %q is not an absolute http(s) URL", cfg.BaseURL)
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("openaimodel: model name is required")
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = 2
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
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
		backoff:    cfg.Backoff,
		maxBackoff: cfg.MaxBackoff,
	}, nil
}

// Name implements llm.Model.
func (m *openAIModel) Name() string { return m.model }

// Generate implements llm.Model: one streamed chat completion, tool-call deltas assembled by index.
func (m *openAIModel) Generate(ctx context.Context, req llm.Request, onDelta func(string)) (llm.Response, error) {
	params, err := m.params(req)
	if err != nil {
		return llm.Response{}, err
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
			return llm.Response{}, fmt.Errorf("chat completions: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func retryable(status int) bool { return status == http.StatusTooManyRequests || status >= 500 }

type toolCallBuilder struct {
	id, name string
	args     strings.Builder
}

// toolCalls assembles streamed tool-call deltas. OpenAI sends each call's id and name once and its
// arguments in pieces, keyed by index. Compatible servers differ: some send a whole call in one
// delta, several calls in one chunk without any index (older Ollama), an empty id on every
// continuation (DashScope), or the whole name again in every chunk; the legacy function_call
// delta carries a single call with neither id nor index.
type toolCalls struct {
	calls   []*toolCallBuilder
	byIndex map[int64]int // server index → position in calls
}

// add applies one tool-call delta. pos is its position within its chunk, used when the server
// sends no index.
func (t *toolCalls) add(tc openai.ChatCompletionChunkChoiceDeltaToolCall, pos int) error {
	if t.byIndex == nil {
		t.byIndex = make(map[int64]int)
	}
	var b *toolCallBuilder
	switch {
	case tc.JSON.Index.Valid():
		if tc.Index < 0 || tc.Index > 127 {
			return fmt.Errorf("chat completions: tool call index %d out of range", tc.Index)
		}
		i, ok := t.byIndex[tc.Index]
		// A new id under a known index is a new call (servers that number every call 0).
		if !ok || (tc.ID != "" && t.calls[i].id != "" && t.calls[i].id != tc.ID) {
			i = t.open()
			t.byIndex[tc.Index] = i
		}
		b = t.calls[i]
	case tc.ID != "":
		// No index: an id names the call; a known id continues it, a new one opens a call.
		for _, c := range t.calls {
			if c.id == tc.ID {
				b = c
			}
		}
		if b == nil {
			b = t.calls[t.open()]
		}
	case pos > 0 || len(t.calls) == 0:
		// No index and no id: the n-th delta of a chunk that holds several calls is a call of its
		// own; a lone delta continues the last call.
		b = t.calls[t.open()]
	default:
		b = t.calls[len(t.calls)-1]
	}
	if len(t.calls) > 128 {
		return errors.New("chat completions: more than 128 tool calls")
	}
	if tc.ID != "" {
		b.id = tc.ID
	}
	// Names arrive once in OpenAI's streams; some compatible servers repeat the whole name in
	// every chunk, which must not double it.
	if n := tc.Function.Name; n != "" && n != b.name {
		b.name += n
	}
	b.args.WriteString(tc.Function.Arguments)
	return nil
}

// addLegacy applies a deprecated function_call delta: one call, name then argument pieces.
func (t *toolCalls) addLegacy(name, args string) {
	if len(t.calls) == 0 {
		t.open()
	}
	b := t.calls[len(t.calls)-1]
	if name != "" && name != b.name {
		b.name += name
	}
	b.args.WriteString(args)
}

func (t *toolCalls) open() int {
	t.calls = append(t.calls, &toolCallBuilder{})
	return len(t.calls) - 1
}

// result lists the assembled calls; calls without an id get call_1, call_2, … by position, and
// empty arguments become "{}" (a call of a tool without parameters).
func (t *toolCalls) result() []store.ToolCall {
	var out []store.ToolCall
	for i, b := range t.calls {
		if b.name == "" && b.id == "" && b.args.Len() == 0 {
			continue // an index the server skipped
		}
		id := b.id
		if id == "" {
			id = "call_" + strconv.Itoa(i+1)
		}
		args := b.args.String()
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		out = append(out, store.ToolCall{ID: id, Name: b.name, Arguments: args})
	}
	return out
}

// maxErrorBody bounds how much of an error response (or a non-stream answer) is read.
const maxErrorBody = 64 << 10

// exchange is what the middleware saw of one HTTP exchange.
type exchange struct {
	status     atomic.Int64
	retryAfter atomic.Int64
	mu         sync.Mutex
	body       []byte // an error body, or a 200 body that was not an event stream
	json200    bool   // the 200 answer was not an event stream
	done       atomic.Bool
}

// stream makes one request. It reports the HTTP status (0 when none arrived), the server's
// Retry-After, and whether any token (text or tool call) was received.
func (m *openAIModel) stream(ctx context.Context, params openai.ChatCompletionNewParams, onDelta func(string)) (resp llm.Response, status int, retryAfter time.Duration, tokens bool, err error) {
	ex := &exchange{}
	// The middleware sees the HTTP status even when the error body is not JSON (the SDK then returns
	// a decoding error instead of an *openai.Error), keeps error bodies for their message, notes
	// whether the stream's [DONE] arrived, and catches answers that are not event streams.
	record := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if res == nil {
			return res, err
		}
		ex.status.Store(int64(res.StatusCode))
		ex.retryAfter.Store(int64(parseRetryAfter(res.Header.Get("Retry-After"))))
		mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
		switch {
		case res.StatusCode >= 400:
			body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
			_ = res.Body.Close()
			ex.mu.Lock()
			ex.body = body
			ex.mu.Unlock()
			res.Body = io.NopCloser(bytes.NewReader(body)) // the SDK reads it again for its error
			return res, err
		case res.StatusCode < 300 && mt != "text/event-stream":
			// Some servers label their stream otherwise; a body that opens with a JSON object is
			// a whole answer (or an error) instead of a stream.
			br := bufio.NewReader(res.Body)
			head, _ := br.Peek(512)
			if t := bytes.TrimLeft(head, " \t\r\n"); len(t) > 0 && t[0] == '{' {
				body, _ := io.ReadAll(io.LimitReader(br, maxErrorBody*16))
				_ = res.Body.Close()
				ex.mu.Lock()
				ex.body, ex.json200 = body, true
				ex.mu.Unlock()
				res.Body = io.NopCloser(strings.NewReader("")) // nothing left for the SSE decoder
				return res, err
			}
			res.Body = struct {
				io.Reader
				io.Closer
			}{br, res.Body}
		}
		res.Body = &doneWatcher{ReadCloser: res.Body, done: &ex.done}
		return res, err
	})
	s := m.svc.NewStreaming(ctx, params, record)
	defer s.Close()

	var text strings.Builder
	var calls toolCalls
	think := &thinkFilter{}
	emit := func(d string) {
		if d = think.push(d); d != "" {
			tokens = true
			text.WriteString(d)
			onDelta(d)
		}
	}
	finish := ""
	for s.Next() {
		chunk := s.Current()
		if len(chunk.Choices) == 0 {
			// Usage-only chunks have no choices; so do error events in shapes the SDK does not
			// recognise (e.g. {"object":"error","message":…}).
			if msg := errorMessage([]byte(chunk.RawJSON())); msg != "" {
				return resp, int(ex.status.Load()), 0, tokens, fmt.Errorf("chat completions: the provider reported an error mid-stream: %s", m.redact(msg))
			}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			// Reasoning (reasoning_content, reasoning) is never read: only content is the answer.
			emit(ch.Delta.Content)
			for pos, tc := range ch.Delta.ToolCalls {
				tokens = true
				if err := calls.add(tc, pos); err != nil {
					return llm.Response{}, int(ex.status.Load()), 0, true, err
				}
			}
			if fc := ch.Delta.FunctionCall; fc.Name != "" || fc.Arguments != "" {
				tokens = true
				calls.addLegacy(fc.Name, fc.Arguments)
			}
		}
	}
	emit(think.flush())
	resp.Text = text.String()
	resp.ToolCalls = calls.result()
	status = int(ex.status.Load())
	retryAfter = time.Duration(ex.retryAfter.Load())
	ex.mu.Lock()
	body, json200 := ex.body, ex.json200
	ex.mu.Unlock()
	if err := s.Err(); err != nil && ctx.Err() == nil {
		return resp, status, retryAfter, tokens, m.describeError(err, status, body)
	} else if err != nil {
		return resp, status, retryAfter, tokens, fmt.Errorf("chat completions: %w", ctx.Err())
	}
	if status >= 400 {
		return resp, status, retryAfter, tokens, m.describeError(nil, status, body)
	}
	if json200 {
		return m.wholeAnswer(body, onDelta, status)
	}
	switch finish {
	case "stop", "tool_calls", "function_call":
	case "":
		if !ex.done.Load() {
			// Neither a finish reason nor [DONE]: the connection ended in the middle of the answer.
			return resp, status, retryAfter, tokens, errors.New("chat completions: the stream ended before the model finished (no finish_reason, no [DONE])")
		}
		m.log.Warn("chat completions: stream ended without a finish reason", "text_bytes", len(resp.Text), "tool_calls", len(resp.ToolCalls))
	case "length":
		if len(resp.ToolCalls) > 0 {
			// Arguments cut at the token limit are not a call anyone can run.
			return resp, status, retryAfter, tokens, errors.New("chat completions: the model ran out of tokens in the middle of a tool call (finish_reason length)")
		}
		m.log.Warn("chat completions: answer cut short", "finish_reason", finish)
	case "content_filter":
		m.log.Warn("chat completions: answer cut short", "finish_reason", finish)
	default:
		// e.g. DeepSeek's insufficient_system_resource: the provider broke the answer off.
		return resp, status, retryAfter, tokens, fmt.Errorf("chat completions: the provider stopped the answer (finish_reason %s)", shorten(finish, 60))
	}
	return resp, status, retryAfter, tokens, nil
}

// wholeAnswer handles a 200 answer that is not an event stream: a complete chat completion (a
// server or proxy that ignores "stream": true) is accepted; anything else is an error.
func (m *openAIModel) wholeAnswer(body []byte, onDelta func(string), status int) (llm.Response, int, time.Duration, bool, error) {
	var cc openai.ChatCompletion
	if err := json.Unmarshal(body, &cc); err != nil || len(cc.Choices) == 0 {
		if msg := m.redact(errorMessage(body)); msg != "" {
			return llm.Response{}, status, 0, false, fmt.Errorf("chat completions: %s", msg)
		}
		return llm.Response{}, status, 0, false, errors.New("chat completions: the server answered with neither an event stream nor a chat completion")
	}
	msg := cc.Choices[0].Message
	think := &thinkFilter{}
	text := think.push(msg.Content) + think.flush()
	var resp llm.Response
	if text != "" {
		resp.Text = text
		onDelta(text)
	}
	for i, tc := range msg.ToolCalls {
		id := tc.ID
		if id == "" {
			id = "call_" + strconv.Itoa(i+1)
		}
		resp.ToolCalls = append(resp.ToolCalls, store.ToolCall{ID: id, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return resp, status, 0, text != "" || len(resp.ToolCalls) > 0, nil
}

// doneWatcher notes when the event stream's "data: [DONE]" sentinel passes by.
type doneWatcher struct {
	io.ReadCloser
	done *atomic.Bool
	tail []byte // the end of the previous read, for a sentinel split across reads
}

var doneSentinel = []byte("[DONE]")

func (d *doneWatcher) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if n > 0 && !d.done.Load() {
		buf := append(d.tail, p[:n]...)
		if bytes.Contains(buf, doneSentinel) {
			d.done.Store(true)
		}
		d.tail = append(d.tail[:0], buf[max(0, len(buf)-len(doneSentinel)+1):]...)
	}
	return n, err
}

// thinkFilter removes a leading <think>…</think> block from an answer's content: reasoning models
// served without a reasoning parser (Ollama's and vLLM's defaults for DeepSeek-R1 and Qwen3) put
// their chain of thought there instead of in a reasoning field, and it must never reach the
// answer. Only a block at the very start counts (after optional whitespace); a later "<think>" is
// text. It holds back at most a possible tag.
type thinkFilter struct {
	state int // 0 undecided, 1 inside the block, 2 passing through, 3 after the block (trimming)
	buf   string
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

func (f *thinkFilter) push(s string) string {
	if s == "" {
		return ""
	}
	switch f.state {
	case 2:
		return s
	case 0:
		f.buf += s
		t := strings.TrimLeft(f.buf, " \t\r\n")
		switch {
		case strings.HasPrefix(t, thinkOpen):
			f.state, f.buf = 1, ""
			return f.push(t[len(thinkOpen):])
		case strings.HasPrefix(thinkOpen, t):
			return "" // still possibly the tag
		}
		out := f.buf
		f.state, f.buf = 2, ""
		return out
	case 1:
		f.buf += s
		if i := strings.Index(f.buf, thinkClose); i >= 0 {
			rest := f.buf[i+len(thinkClose):]
			f.state, f.buf = 3, ""
			return f.push(rest)
		}
		// Keep only what could begin the closing tag.
		if k := len(f.buf) - len(thinkClose) + 1; k > 0 {
			f.buf = f.buf[k:]
		}
		return ""
	case 3:
		s = strings.TrimLeft(s, " \t\r\n")
		if s != "" {
			f.state = 2
		}
		return s
	}
	return s
}

// flush ends the content: an undecided start is text after all; an unclosed block was all
// reasoning and is dropped.
func (f *thinkFilter) flush() string {
	out := ""
	if f.state == 0 {
		out = f.buf
	}
	f.buf = ""
	return out
}

// secretLike matches API keys some servers echo back in error messages.
var secretLike = regexp.MustCompile(`(sk|key)-[A-Za-z0-9_\-*]{6,}`)

// redact removes the API key and anything key-like from a server message and shortens it: the
// message reaches users and logs.
func (m *openAIModel) redact(msg string) string {
	if m.apiKey != "" {
		msg = strings.ReplaceAll(msg, m.apiKey, "***")
	}
	return shorten(secretLike.ReplaceAllString(msg, "***"), 200)
}

// describeError turns a failed exchange into "chat completions: 429 Too Many Requests: <message>",
// or "chat completions: the provider reported an error mid-stream: <message>". The message comes
// from the server's error body in whatever shape it has (see errorMessage).
func (m *openAIModel) describeError(err error, status int, body []byte) error {
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	switch {
	case errors.As(err, &streamErr):
		msg := m.redact(errorMessage(streamErr.Event.Data))
		if msg == "" {
			msg = "no message"
		}
		return fmt.Errorf("chat completions: the provider reported an error mid-stream: %s", msg)
	case errors.As(err, &apiErr):
		status = apiErr.StatusCode
		if len(body) == 0 {
			body = []byte(apiErr.RawJSON())
		}
	case status < 400:
		return fmt.Errorf("chat completions: %w", err)
	}
	msg := m.redact(errorMessage(body))
	if msg == "" {
		return fmt.Errorf("chat completions: %d %s", status, http.StatusText(status))
	}
	return fmt.Errorf("chat completions: %d %s: %s", status, http.StatusText(status), msg)
}

// errorMessage finds the human message in an error body, whatever the server's shape:
// {"error":{"message":…}} (OpenAI, DeepSeek, DashScope compatible mode, Ollama /v1),
// {"error":"…"} (Ollama's native API), {"object":"error","message":…} (vLLM),
// {"code":…,"message":…} (DashScope's native API), {"detail":…} (FastAPI servers), or plain text.
// An HTML page (a proxy's error page) and an empty body give "".
func errorMessage(body []byte) string {
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		return ""
	}
	if t[0] != '{' {
		if t[0] == '<' || !utf8.Valid(t) {
			return ""
		}
		return string(t)
	}
	var v map[string]any
	if json.Unmarshal(t, &v) != nil {
		return ""
	}
	str := func(x any) string {
		s, _ := x.(string)
		return strings.TrimSpace(s)
	}
	if e, ok := v["error"]; ok {
		switch e := e.(type) {
		case string:
			return strings.TrimSpace(e)
		case map[string]any:
			if s := str(e["message"]); s != "" {
				return s
			}
			if s := str(e["code"]); s != "" {
				return s
			}
			if s := str(e["type"]); s != "" {
				return s
			}
		}
	}
	if str(v["object"]) == "error" || v["code"] != nil || v["message"] != nil {
		if s := str(v["message"]); s != "" {
			return s
		}
	}
	switch d := v["detail"].(type) {
	case string:
		return strings.TrimSpace(d)
	case []any:
		if len(d) > 0 {
			if m, ok := d[0].(map[string]any); ok {
				return str(m["msg"])
			}
		}
	}
	return str(v["msg"])
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

// params converts a llm.Request into chat completion parameters.
func (m *openAIModel) params(req llm.Request) (openai.ChatCompletionNewParams, error) {
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

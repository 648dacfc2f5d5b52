package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// modelFunc is an in-process Model; round counts the calls of one test.
type modelFunc struct {
	mu    sync.Mutex
	round int
	fn    func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error)
}

func (m *modelFunc) Name() string { return "func-model" }

func (m *modelFunc) Generate(ctx context.Context, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
	m.mu.Lock()
	m.round++
	r := m.round
	m.mu.Unlock()
	return m.fn(ctx, r, req, onDelta)
}

func searchCall(id string) ModelResponse {
	return ModelResponse{ToolCalls: []store.ToolCall{{ID: id, Name: "web_search", Arguments: `{"query":"q"}`}}}
}

func TestHugeAnswer(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hitInvoice, hitTypes)

	// 10,000 markers, 1 and 2 valid, the rest out of range, in more than 1 MiB of text.
	var b strings.Builder
	filler := strings.Repeat("引用溯源测试文本。", 4) // 108 bytes
	for i := 0; b.Len() < 1<<20 || i < 10000; i++ {
		b.WriteString(filler)
		if i < 10000 {
			fmt.Fprintf(&b, "[^%d^]", []int{1, 2, 3, 999999, 0}[i%5])
		}
	}
	huge := b.String()
	require.GreaterOrEqual(t, len(huge), 1<<20)

	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		if round == 1 {
			return searchCall("c1"), nil
		}
		for i := 0; i < len(huge); i += 4093 { // an odd chunk size cuts markers and runes alike
			onDelta(huge[i:min(i+4093, len(huge))])
		}
		return ModelResponse{Text: huge}, nil
	}}
	var deltas strings.Builder
	var mu sync.Mutex
	a := newAgent(t, Config{Store: st, Model: m, Tools: []Tool{search}})
	out := run(t, a, sid, "长回答", func(ev Event) {
		if ev.Type == EventAnswerDelta {
			mu.Lock()
			deltas.WriteString(ev.Text)
			mu.Unlock()
		}
	})
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	require.Len(t, out.Citations, 2)
	assert.Equal(t, 1, out.Citations[0].N)
	assert.Equal(t, 2, out.Citations[1].N)
	assert.Equal(t, huge, out.Content)
	mu.Lock()
	assert.Equal(t, citations.Strip(huge), deltas.String())
	mu.Unlock()
	runs, err := st.ListRuns(context.Background(), sid)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, [3]int{10000, 4000, 6000}, [3]int{runs[0].MarkersSeen, runs[0].MarkersKept, runs[0].MarkersDropped})
}

func TestPanicsAreContained(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hitInvoice)
	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		switch round {
		case 1:
			onDelta("写到一半")
			panic("model bug")
		case 2:
			return searchCall("c1"), nil
		default:
			onDelta("先红冲再重开。[^1^]")
			return ModelResponse{Text: "先红冲再重开。[^1^]"}, nil
		}
	}}
	a := newAgent(t, Config{Store: st, Model: m, Tools: []Tool{search}})
	unsub := a.Subscribe(func(Event) { panic("subscriber bug") })
	defer unsub()

	rec := &recorder{}
	out := run(t, a, sid, "第一问", rec.sink)
	assert.Equal(t, store.PhaseFailed, out.Phase)
	assert.Equal(t, "模型服务暂时不可用，请稍后再试。", out.Error, "a panicking model reads as an unavailable one")
	assert.Equal(t, "写到一半", out.Content, "partial text is kept")
	checkEventOrder(t, rec.all())

	// The agent keeps serving, and a panicking per-turn sink does not hurt the run either.
	out = run(t, a, sid, "第二问", func(Event) { panic("sink bug") })
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	require.Len(t, out.Citations, 1)
}

func TestCloseCancelsAndRefuses(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	started := make(chan struct{})
	var once sync.Once
	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		onDelta("思考中")
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ModelResponse{}, ctx.Err()
	}}
	a, err := New(Config{Store: st, Model: m, Logger: testLogger(t)})
	require.NoError(t, err)
	rec := &recorder{}
	a.Subscribe(rec.sink)
	h1, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "一"})
	require.NoError(t, err)
	h2, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "二"})
	require.NoError(t, err)
	<-started

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.Close(ctx))
	for _, h := range []*RunHandle{h1, h2} {
		select {
		case <-h.Done():
		default:
			t.Fatal("Close returned before the run finished")
		}
		assert.Equal(t, store.PhaseCancelled, h.Outcome().Phase)
		r, err := st.GetRun(context.Background(), h.ID)
		require.NoError(t, err)
		assert.Equal(t, store.PhaseCancelled, r.Phase)
		checkEventOrder(t, rec.ofRun(h.ID))
	}
	assert.Equal(t, "思考中", h1.Outcome().Content)

	_, err = a.Submit(context.Background(), Turn{SessionID: sid, Text: "三"})
	require.ErrorIs(t, err, ErrClosed)

	// The user messages are kept.
	msgs, err := st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	var users []string
	for _, m := range msgs {
		if m.Role == store.RoleUser {
			users = append(users, m.Content)
		}
	}
	assert.Equal(t, []string{"一", "二"}, users)
}

func TestCloseBoundedByContext(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	release := make(chan struct{})
	started := make(chan struct{})
	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		close(started)
		<-release // ignores cancellation
		return ModelResponse{Text: "ok"}, nil
	}}
	a, err := New(Config{Store: st, Model: m, Logger: testLogger(t)})
	require.NoError(t, err)
	h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "一"})
	require.NoError(t, err)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Close returns on its context while the model still holds the run (release is closed only
	// afterwards), so this proves the bound without timing anything.
	err = a.Close(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	out := wait(t, h)
	assert.Equal(t, store.PhaseCancelled, out.Phase, "the context was cancelled while the model ran")
}

func TestQueueLimit(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	release := make(chan struct{})
	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return ModelResponse{}, ctx.Err()
		}
		return ModelResponse{Text: "ok"}, nil
	}}
	a := newAgent(t, Config{Store: st, Model: m})
	var hs []*RunHandle
	h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "q"})
	require.NoError(t, err)
	hs = append(hs, h)
	require.Eventually(t, func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.round == 1 }, 30*time.Second, time.Millisecond)
	for i := 0; i < MaxQueuedPerSession; i++ {
		h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "q"})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	_, err = a.Submit(context.Background(), Turn{SessionID: sid, Text: "q"})
	require.ErrorIs(t, err, ErrQueueFull)
	close(release)
	for _, h := range hs {
		assert.Equal(t, store.PhaseCompleted, wait(t, h).Phase)
	}
}

func TestEnglishErrorsAndPrompt(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	var sys string
	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		sys = req.Messages[0].Content
		return ModelResponse{}, errors.New("connection refused")
	}}
	a := newAgent(t, Config{Store: st, Model: m, Lang: "en"})
	out := run(t, a, sid, "hello", nil)
	assert.Equal(t, store.PhaseFailed, out.Phase)
	assert.Equal(t, "the model service is unavailable right now; try again in a moment", out.Error)
	assert.Equal(t, SystemPrompt("en", testNow), sys)
}

func TestEmptyAnswerFails(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		return ModelResponse{}, nil
	}}
	a := newAgent(t, Config{Store: st, Model: m})
	rec := &recorder{}
	out := run(t, a, sid, "hello", rec.sink)
	assert.Equal(t, store.PhaseFailed, out.Phase)
	assert.Equal(t, "模型没有返回任何内容", out.Error)
	assert.Equal(t, []EventType{EventRunStarted, EventRunFinished}, types(rec.all()))
}

func TestNonStreamingModelStillStreamsStripped(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		return ModelResponse{Text: "没有来源的回答[^1^]"}, nil
	}}
	a := newAgent(t, Config{Store: st, Model: m})
	rec := &recorder{}
	out := run(t, a, sid, "hello", rec.sink)
	require.Equal(t, store.PhaseCompleted, out.Phase)
	assert.Equal(t, []string{"没有来源的回答"}, finalRoundDeltas(rec.all()))
	assert.Empty(t, out.Citations)
}

func TestSystemPrompt(t *testing.T) {
	zh := SystemPrompt("zh", testNow)
	for _, want := range []string{"[^n^]", "ref", "web_search", "open_web_page", "不得编造", "本轮", "2026 年 11 月 30 日（星期一）"} {
		assert.Contains(t, zh, want)
	}
	assert.Equal(t, zh, SystemPrompt("", testNow))
	en := SystemPrompt("en", testNow)
	for _, want := range []string{"[^n^]", "ref number", "Never invent", "this turn", "Monday, 30 November 2026"} {
		assert.Contains(t, en, want)
	}
	assert.NotContains(t, en, "{date}")
	assert.NotContains(t, zh, "{date}")
}

func TestReusedToolCallIDsAreMadeUnique(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hitInvoice, hitTypes)
	m := &modelFunc{fn: func(ctx context.Context, round int, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
		switch round {
		case 1:
			return ModelResponse{ToolCalls: []store.ToolCall{
				{ID: "x", Name: "web_search", Arguments: `{"query":"a"}`},
				{ID: "x", Name: "web_search", Arguments: `{"query":"b"}`},
				{Name: "web_search", Arguments: `{"query":"c"}`},
			}}, nil
		case 2:
			return ModelResponse{ToolCalls: []store.ToolCall{{ID: "x", Name: "web_search", Arguments: `{"query":"d"}`}}}, nil
		default:
			// Every tool message the model sees answers exactly one of its calls.
			ids := map[string]int{}
			for _, msg := range req.Messages {
				for _, c := range msg.ToolCalls {
					ids[c.ID]++
				}
				if msg.Role == "tool" {
					ids[msg.ToolCallID] += 10
				}
			}
			for id, n := range ids {
				if n != 11 {
					return ModelResponse{}, fmt.Errorf("call id %q used %d", id, n)
				}
			}
			onDelta("ok[^2^]")
			return ModelResponse{Text: "ok[^2^]"}, nil
		}
	}}
	a := newAgent(t, Config{Store: st, Model: m, Tools: []Tool{search}})
	out := run(t, a, sid, "q", nil)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	require.Len(t, out.Citations, 1)
	assert.Equal(t, hitTypes.url, out.Citations[0].URL)
}

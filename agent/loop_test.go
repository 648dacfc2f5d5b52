package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

var (
	hitInvoice = hit{"电子发票抬头开错了怎么办", "https://kb.example.com/kb/einvoice", "抬头写错时，应先申请红冲原发票，再按正确抬头重新开具。"}
	hitTypes   = hit{"增值税专用发票与普通发票", "https://kb.example.com/kb/invoice-types", "专票可以抵扣进项税。"}
	hitLeave   = hit{"年假制度", "https://kb.example.com/kb/leave", "入职满一年享有 5 天年假。"}
	pageGuide  = hit{"红冲操作指南", "https://tax.example.cn/guide", "红字发票信息确认单由购买方或销售方发起。"}
)

func TestCitationsStoredThroughOpenAILoop(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, searches := searchTool(hitInvoice, hitTypes, hitLeave)
	final := "抬头错了不能直接改。[^1^]\n应先红冲再重开[^1^]，确认单可由任一方发起。[^4^] 专票可抵扣。[^2^] 伪造来源[^9^]，零号[^0^]。"
	llm := newFakeLLM(t,
		toolStream("我先查一下。",
			call{id: "call_a", name: "web_search", args: []string{`{"que`, `ry":"电子发票`, `抬头写错"}`}},
			call{id: "call_b", name: "open_web_page", args: []string{`{"url":`, `"https://tax.example.cn/guide"}`}},
		),
		// The final answer arrives in pieces that cut markers in half.
		textStream("抬头错了不能直接改。[", "^1^]\n应先红冲再重开[^", "1^]，确认单可由任一方发起。[^4", "^] 专票可抵扣。[^2^", "] 伪造来源[^9^]，零号[^0^", "]。"),
	)
	rec := &recorder{}
	a := newAgent(t, Config{Store: st, Model: llm.model(t), Tools: []Tool{search, pageTool(map[string]hit{pageGuide.url: pageGuide})}})
	unsub := a.Subscribe(rec.sink)
	defer unsub()

	out := run(t, a, sid, "电子发票抬头写错了怎么办？", nil)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	require.Equal(t, final, out.Content)
	require.Equal(t, 1, *searches)

	// Registry: 1 invoice, 2 types, 3 leave (search, call order first), 4 the opened page. Each
	// citation names its tool call and that call's stored TOOL message.
	at := testNow
	runMsgs, err := st.ListRunMessages(context.Background(), rec.all()[0].RunID)
	require.NoError(t, err)
	toolMsg := map[string]uint64{}
	for _, m := range runMsgs {
		if m.Role == store.RoleTool {
			toolMsg[m.ToolCallID] = m.ID
		}
	}
	require.Len(t, toolMsg, 2)
	want := []citations.Citation{
		{N: 1, URL: hitInvoice.url, Title: hitInvoice.title, Tool: "web_search", RetrievedAt: &at, Digest: citations.Digest(hitInvoice.content), Lead: citations.Lead(hitInvoice.content), CallID: "call_a", MessageID: toolMsg["call_a"]},
		{N: 2, URL: hitTypes.url, Title: hitTypes.title, Tool: "web_search", RetrievedAt: &at, Digest: citations.Digest(hitTypes.content), Lead: citations.Lead(hitTypes.content), CallID: "call_a", MessageID: toolMsg["call_a"]},
		{N: 4, URL: pageGuide.url, Title: pageGuide.title, Tool: "open_web_page", RetrievedAt: &at, Digest: citations.Digest(pageGuide.content), Lead: citations.Lead(pageGuide.content), CallID: "call_b", MessageID: toolMsg["call_b"]},
	}
	require.Equal(t, want, out.Citations)

	// Stored record: exactly the cited entries in n order, written with the answer itself.
	msg, err := st.GetMessage(context.Background(), out.FinalMessageID)
	require.NoError(t, err)
	var meta map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(msg.Metadata, &meta))
	assert.Len(t, meta, 1, "only the citations key: %s", msg.Metadata)
	wantJSON, err := json.Marshal(want)
	require.NoError(t, err)
	assert.JSONEq(t, string(wantJSON), string(meta["citations"]))
	assert.Equal(t, want, citations.FromMetadata(msg.Metadata))
	assert.Equal(t, final, msg.Content, "content keeps the raw markers")

	// Run record: phase and marker counts (1,1,4,2 kept; 9 and 0 dropped).
	r, err := st.GetRun(context.Background(), rec.all()[0].RunID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseCompleted, r.Phase)
	assert.Equal(t, out.FinalMessageID, r.FinalMessageID)
	assert.Equal(t, out.UserMessageID, r.UserMessageID)
	assert.Equal(t, "desktop", r.Channel)
	assert.Equal(t, [3]int{6, 4, 2}, [3]int{r.MarkersSeen, r.MarkersKept, r.MarkersDropped})

	// Events.
	evs := rec.all()
	checkEventOrder(t, evs)
	checkDeltas(t, evs)
	assert.Equal(t, citations.Strip(final), strings.Join(finalRoundDeltas(evs), ""))
	assert.Equal(t, "test-model", evs[0].Model)
	assert.Equal(t, out.UserMessageID, evs[0].UserMessageID)
	var started, finished []Event
	var cit, fin, runFin Event
	for _, ev := range evs {
		switch ev.Type {
		case EventToolStarted:
			started = append(started, ev)
		case EventToolFinished:
			finished = append(finished, ev)
		case EventCitations:
			cit = ev
		case EventAnswerFinal:
			fin = ev
		case EventRunFinished:
			runFin = ev
		}
	}
	require.Len(t, started, 2)
	assert.Equal(t, "call_a", started[0].CallID)
	assert.Equal(t, `{"query":"电子发票抬头写错"}`, started[0].Arguments)
	assert.Equal(t, "open_web_page", started[1].Tool)
	require.Len(t, finished, 2)
	assert.True(t, finished[0].OK)
	assert.True(t, finished[1].OK)
	assert.Equal(t, out.FinalMessageID, fin.MessageID)
	assert.Equal(t, final, fin.Content)
	assert.Equal(t, out.FinalMessageID, cit.MessageID)
	assert.Equal(t, want, cit.Citations)
	assert.Equal(t, store.PhaseCompleted, runFin.Phase)
	assert.Equal(t, [3]int{6, 4, 2}, [3]int{runFin.MarkersSeen, runFin.MarkersKept, runFin.MarkersDropped})

	// The second request carries the tool results annotated with their registry numbers.
	msgs := llm.messages(1)
	require.Len(t, msgs, 5) // system, user, assistant(tool calls), tool, tool
	assert.Equal(t, "system", msgs[0]["role"])
	assert.Contains(t, msgs[0]["content"], "[^n^]")
	assert.Equal(t, "assistant", msgs[2]["role"])
	tcs := msgs[2]["tool_calls"].([]any)
	require.Len(t, tcs, 2)
	assert.Equal(t, `{"url":"https://tax.example.cn/guide"}`, tcs[1].(map[string]any)["function"].(map[string]any)["arguments"])
	var sr struct {
		Results []struct {
			URL string `json:"url"`
			Ref int    `json:"ref"`
		} `json:"results"`
	}
	require.Equal(t, "call_a", msgs[3]["tool_call_id"])
	require.NoError(t, json.Unmarshal([]byte(msgs[3]["content"].(string)), &sr))
	require.Len(t, sr.Results, 3)
	for i, r := range sr.Results {
		assert.Equal(t, i+1, r.Ref, r.URL)
	}
	var pg struct {
		Ref int `json:"ref"`
	}
	require.NoError(t, json.Unmarshal([]byte(msgs[4]["content"].(string)), &pg))
	assert.Equal(t, 4, pg.Ref)
	tools := llm.request(0)["tools"].([]any)
	require.Len(t, tools, 2)

	// Stored messages: USER, ASSISTANT(tool calls, round text), TOOL ×2 in call order, ASSISTANT.
	all, err := st.ListMessages(context.Background(), sid)
	require.NoError(t, err)
	require.Len(t, all, 5)
	assert.Equal(t, []store.Role{store.RoleUser, store.RoleAssistant, store.RoleTool, store.RoleTool, store.RoleAssistant},
		[]store.Role{all[0].Role, all[1].Role, all[2].Role, all[3].Role, all[4].Role})
	assert.Equal(t, "我先查一下。", all[1].Content)
	assert.Len(t, all[1].ToolCalls, 2)
	assert.Equal(t, "call_a", all[2].ToolCallID)
	assert.Equal(t, "web_search", all[2].ToolName)
	assert.Contains(t, all[2].Content, `"ref":1`)
	assert.Equal(t, "call_b", all[3].ToolCallID)
	for _, m := range all {
		assert.Equal(t, r.ID, m.RunID)
	}
}

func TestEarlierRunSourcesDoNotCount(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hitInvoice, hitTypes)
	llm := newFakeLLM(t,
		toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
		textStream("先红冲再重开。[^1^]"),
		// Run 2 searches nothing and cites what only run 1 retrieved.
		textStream("专票可以抵扣。[^2^] 同上。[^1^]"),
	)
	a := newAgent(t, Config{Store: st, Model: llm.model(t), Tools: []Tool{search}})

	out1 := run(t, a, sid, "发票抬头错了怎么办", nil)
	require.Equal(t, store.PhaseCompleted, out1.Phase, out1.Error)
	require.Len(t, out1.Citations, 1)

	rec := &recorder{}
	out2 := run(t, a, sid, "那专票呢？", rec.sink)
	require.Equal(t, store.PhaseCompleted, out2.Phase, out2.Error)
	assert.Empty(t, out2.Citations)
	for _, ev := range rec.all() {
		assert.NotEqual(t, EventCitations, ev.Type)
	}
	msg, err := st.GetMessage(context.Background(), out2.FinalMessageID)
	require.NoError(t, err)
	assert.Empty(t, msg.Metadata, "no valid marker: the key is not written")
	r, err := st.GetRun(context.Background(), rec.all()[0].RunID)
	require.NoError(t, err)
	assert.Equal(t, [3]int{2, 0, 2}, [3]int{r.MarkersSeen, r.MarkersKept, r.MarkersDropped})

	// History of run 2: system, the first question, the first answer without markers, the new
	// question. Earlier tool calls and results are not resent.
	msgs := llm.messages(2)
	require.Len(t, msgs, 4)
	assert.Equal(t, "user", msgs[1]["role"])
	assert.Equal(t, "发票抬头错了怎么办", msgs[1]["content"])
	assert.Equal(t, "assistant", msgs[2]["role"])
	assert.Equal(t, "先红冲再重开。", msgs[2]["content"])
	assert.Nil(t, msgs[2]["tool_calls"])
	assert.Equal(t, "那专票呢？", msgs[3]["content"])
}

func TestHooksIsolated(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hitInvoice)
	llm := newFakeLLM(t,
		toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
		textStream("先红冲再重开。[^1^]"),
	)
	var mu sync.Mutex
	var seen []RunResult
	stuck := make(chan struct{})
	record := hookFunc{name: "record", fn: func(ctx context.Context, r RunResult) error {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		return nil
	}}
	a := newAgent(t, Config{Store: st, Model: llm.model(t), Tools: []Tool{search}, HookTimeout: 200 * time.Millisecond,
		Hooks: []Hook{
			hookFunc{name: "panics", fn: func(context.Context, RunResult) error { panic("hook bug") }},
			hookFunc{name: "fails", fn: func(context.Context, RunResult) error { return errors.New("hook error") }},
			hookFunc{name: "stuck", fn: func(context.Context, RunResult) error { <-stuck; return nil }}, // ignores its context
			record,
		}})
	// The stuck hook is released only when the test ends, so a run that finishes at all did not
	// wait for it: the bound is proven without timing anything.
	t.Cleanup(func() { close(stuck) })
	rec := &recorder{}
	out := run(t, a, sid, "发票抬头错了怎么办", rec.sink)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	require.Len(t, out.Citations, 1)
	checkEventOrder(t, rec.all())
	mu.Lock()
	require.Len(t, seen, 1)
	assert.Equal(t, store.PhaseCompleted, seen[0].Run.Phase)
	require.NotNil(t, seen[0].Final)
	assert.Equal(t, out.FinalMessageID, seen[0].Final.ID)
	mu.Unlock()
	r, err := st.GetRun(context.Background(), rec.all()[0].RunID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseCompleted, r.Phase)
}

type hookFunc struct {
	name string
	fn   func(ctx context.Context, r RunResult) error
}

func (h hookFunc) Name() string                                    { return h.name }
func (h hookFunc) AfterRun(ctx context.Context, r RunResult) error { return h.fn(ctx, r) }

func TestRunsThatDoNotCompleteGetNoCitations(t *testing.T) {
	tests := []struct {
		name      string
		replies   []reply
		phase     store.Phase
		errSubstr string
		requests  int
		partial   string // interrupted ASSISTANT text kept, "" for none
	}{
		{
			name: "server 500 after retries",
			replies: []reply{
				toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
				{status: 500, body: `{"error":{"message":"upstream exploded"}}`},
				{status: 500, body: `{"error":{"message":"upstream exploded"}}`},
				{status: 503, body: `not json at all`},
			},
			phase: store.PhaseFailed, errSubstr: "模型服务暂时不可用", requests: 4,
		},
		{
			name: "stream error after tokens is not retried",
			replies: []reply{
				toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
				{chunks: []string{chunk(map[string]any{"content": "先红冲再重开。[^1^] 另外"}, nil), `{"error":{"message":"overloaded"}}`}},
			},
			phase: store.PhaseFailed, errSubstr: "模型服务暂时不可用", requests: 2, partial: "先红冲再重开。[^1^] 另外",
		},
		{
			name: "tool rounds exceeded",
			replies: []reply{
				toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
				toolStream("再查一次[^1^]", call{id: "c2", name: "web_search", args: []string{`{"query":"红冲"}`}}),
			},
			phase: store.PhaseFailed, errSubstr: "工具调用轮数", requests: 2, partial: "再查一次[^1^]",
		},
		{
			name:    "client error is not retried",
			replies: []reply{{status: 401, body: `{"error":{"message":"Incorrect API key provided"}}`}},
			phase:   store.PhaseFailed, errSubstr: "模型服务暂时不可用", requests: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t)
			sid := newSession(t, st)
			search, _ := searchTool(hitInvoice)
			llm := newFakeLLM(t, tc.replies...)
			rec := &recorder{}
			a := newAgent(t, Config{Store: st, Model: llm.model(t), Tools: []Tool{search}, MaxRounds: 2})
			out := run(t, a, sid, "发票抬头错了怎么办", rec.sink)
			assert.Equal(t, tc.phase, out.Phase)
			assert.Contains(t, out.Error, tc.errSubstr)
			assert.NotContains(t, out.Error, "chat completions", "provider details go to the log, not to the user")
			assert.NotContains(t, out.Error, "sk-test-secret")
			assert.Empty(t, out.Citations)
			assert.Equal(t, tc.requests, llm.requestCount())
			evs := rec.all()
			checkEventOrder(t, evs)
			checkDeltas(t, evs)
			for _, ev := range evs {
				assert.NotEqual(t, EventCitations, ev.Type)
			}
			last := evs[len(evs)-1]
			assert.Equal(t, tc.phase, last.Phase)
			assert.Equal(t, out.Error, last.Error)

			r, err := st.GetRun(context.Background(), evs[0].RunID)
			require.NoError(t, err)
			assert.Equal(t, tc.phase, r.Phase)
			assert.Equal(t, out.Error, r.Error)
			assert.Zero(t, r.MarkersSeen, "the citation check does not run")

			msgs, err := st.ListMessages(context.Background(), sid)
			require.NoError(t, err)
			lastMsg := msgs[len(msgs)-1]
			if tc.partial == "" {
				assert.NotEqual(t, store.RoleAssistant, lastMsg.Role)
				assert.Zero(t, out.FinalMessageID)
				return
			}
			assert.Equal(t, store.RoleAssistant, lastMsg.Role)
			assert.Equal(t, tc.partial, lastMsg.Content)
			assert.JSONEq(t, `{"interrupted":true}`, string(lastMsg.Metadata))
			assert.Equal(t, lastMsg.ID, out.FinalMessageID)
			assert.Equal(t, tc.partial, out.Content)
		})
	}
}

func TestToolFailuresReachTheModel(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, searches := searchTool(hitInvoice)
	// The slow tool ignores its context on purpose and is released only when the test ends, so a
	// run that completes at all was not held up by it: the tool timeout bounds the round.
	slowRelease := make(chan struct{})
	t.Cleanup(func() { close(slowRelease) })
	slow := funcTool{name: "slow", fn: func(ctx context.Context, args string) (string, error) {
		<-slowRelease
		return "{}", nil
	}}
	boom := funcTool{name: "boom", fn: func(ctx context.Context, args string) (string, error) { panic("tool bug") }}
	failing := funcTool{name: "failing", fn: func(ctx context.Context, args string) (string, error) {
		return "", errors.New("backend down")
	}}
	llm := newFakeLLM(t,
		toolStream("",
			call{id: "c1", name: "web_search", args: []string{`{"query":`, `"发票"`}}, // invalid JSON
			call{id: "c2", name: "calculator", args: []string{`{"x":1}`}},
			call{id: "c3", name: "slow", args: []string{`{}`}},
			call{id: "c4", name: "boom", args: []string{`{}`}},
			call{id: "c5", name: "failing", args: []string{`{}`}},
			call{id: "c6", name: "web_search", args: []string{`[1,2]`}},
		),
		textStream("查不到资料。[^1^]"),
	)
	rec := &recorder{}
	a := newAgent(t, Config{Store: st, Model: llm.model(t), Tools: []Tool{search, slow, boom, failing}, ToolTimeout: 100 * time.Millisecond})
	out := run(t, a, sid, "发票", rec.sink)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	assert.Empty(t, out.Citations, "no source was retrieved")
	assert.Zero(t, *searches, "invalid arguments never reach the tool")

	msgs := llm.messages(1)
	require.Len(t, msgs, 9)
	wantErr := []string{"参数无效", "calculator", "超时", "内部错误", "backend down", "参数无效"}
	for i, w := range wantErr {
		m := msgs[3+i]
		assert.Equal(t, "tool", m["role"])
		var body map[string]string
		require.NoError(t, json.Unmarshal([]byte(m["content"].(string)), &body), m["content"])
		assert.Contains(t, body["error"], w)
	}
	var oks []bool
	for _, ev := range rec.all() {
		if ev.Type == EventToolFinished {
			oks = append(oks, ev.OK)
		}
	}
	assert.Equal(t, []bool{false, false, false, false, false, false}, oks)
	checkEventOrder(t, rec.all())
}

func TestCancelMidStream(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hitInvoice)
	hold := make(chan struct{})
	defer close(hold)
	stalled := textStream("先红冲[^1^]", "再重开")
	stalled.chunks = stalled.chunks[:len(stalled.chunks)-1] // no finish chunk: the stream stalls
	stalled.hold = hold
	llm := newFakeLLM(t,
		toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
		stalled,
	)
	a := newAgent(t, Config{Store: st, Model: llm.model(t), Tools: []Tool{search}})
	assert.False(t, a.Cancel(sid), "nothing running yet")

	gotText := make(chan struct{})
	var once sync.Once
	rec := &recorder{on: func(ev Event) {
		if ev.Type == EventAnswerDelta && strings.Contains(ev.Text, "再重开") {
			once.Do(func() { close(gotText) })
		}
	}}
	h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "发票", Sink: rec.sink})
	require.NoError(t, err)
	select {
	case <-gotText:
	case <-time.After(10 * time.Second):
		t.Fatal("no delta arrived")
	}
	require.True(t, a.Cancel(sid))
	out := wait(t, h)
	assert.Equal(t, store.PhaseCancelled, out.Phase)
	assert.Empty(t, out.Error)
	assert.Empty(t, out.Citations, "a valid marker in a cancelled run is not cited")
	assert.Equal(t, "先红冲[^1^]再重开", out.Content)

	msg, err := st.GetMessage(context.Background(), out.FinalMessageID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"interrupted":true}`, string(msg.Metadata))
	r, err := st.GetRun(context.Background(), h.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseCancelled, r.Phase)
	evs := rec.all()
	checkEventOrder(t, evs)
	assert.Equal(t, store.PhaseCancelled, evs[len(evs)-1].Phase)
	assert.False(t, a.Cancel(sid), "the run has ended")

	// The interrupted answer is not resent as history.
	llm.push(textStream("好的"))
	out2 := run(t, a, sid, "继续", nil)
	require.Equal(t, store.PhaseCompleted, out2.Phase, out2.Error)
	msgs := llm.messages(2)
	require.Len(t, msgs, 3) // system, "发票", "继续"
	assert.Equal(t, "发票", msgs[1]["content"])
	assert.Equal(t, "继续", msgs[2]["content"])
}

func TestRetryBeforeFirstToken(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	llm := newFakeLLM(t,
		reply{status: 429, retryAfter: "0", body: `{"error":{"message":"Rate limit reached"}}`},
		reply{status: 502, body: `bad gateway`},
		textStream("你好"),
	)
	a := newAgent(t, Config{Store: st, Model: llm.model(t)})
	out := run(t, a, sid, "你好", nil)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	assert.Equal(t, "你好", out.Content)
	assert.Equal(t, 3, llm.requestCount())

	// With retries exhausted the status reaches the user.
	llm.push(
		reply{status: 429, body: `{"error":{"message":"Rate limit reached"}}`},
		reply{status: 429, body: `{"error":{"message":"Rate limit reached"}}`},
		reply{status: 429, body: `{"error":{"message":"Rate limit reached"}}`},
	)
	out = run(t, a, sid, "再来", nil)
	assert.Equal(t, store.PhaseFailed, out.Phase)
	assert.Equal(t, "模型服务暂时不可用，请稍后再试。", out.Error)
	assert.Equal(t, 6, llm.requestCount())
}

func TestFIFOPerSession(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	other := newSession(t, st)
	hold := make(chan struct{})
	first := textStream("第一个回答。", "[^1^]")
	first.hold = hold
	llm := newFakeLLM(t, first)
	a := newAgent(t, Config{Store: st, Model: llm.model(t)})
	rec := &recorder{}
	unsub := a.Subscribe(rec.sink)
	defer unsub()

	h1, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "问题一"})
	require.NoError(t, err)
	h2, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "问题二"})
	require.NoError(t, err)
	require.NotEqual(t, h1.ID, h2.ID)

	// While run 1 is stalled, run 2 has not started; another session is served meanwhile.
	require.Eventually(t, func() bool { return llm.requestCount() == 1 }, 10*time.Second, 5*time.Millisecond)
	llm.push(textStream("别的会话"), textStream("第二个回答"))
	outOther := run(t, a, other, "别的问题", nil)
	require.Equal(t, store.PhaseCompleted, outOther.Phase, outOther.Error)
	assert.Equal(t, "别的会话", outOther.Content)
	assert.Empty(t, rec.ofRun(h2.ID), "run 2 waits for run 1")
	close(hold)

	out1, out2 := wait(t, h1), wait(t, h2)
	require.Equal(t, store.PhaseCompleted, out1.Phase, out1.Error)
	require.Equal(t, store.PhaseCompleted, out2.Phase, out2.Error)
	assert.Less(t, out1.FinalMessageID, out2.UserMessageID)

	// Run 2 started only after run 1 finished.
	var seq []string
	for _, ev := range rec.all() {
		if ev.SessionID == sid && (ev.Type == EventRunStarted || ev.Type == EventRunFinished) {
			seq = append(seq, ev.RunID[:4]+string(ev.Type))
		}
	}
	assert.Equal(t, []string{h1.ID[:4] + "run.started", h1.ID[:4] + "run.finished", h2.ID[:4] + "run.started", h2.ID[:4] + "run.finished"}, seq)
	checkEventOrder(t, rec.ofRun(h1.ID))
	checkEventOrder(t, rec.ofRun(h2.ID))

	msgs := llm.messages(2)
	require.Len(t, msgs, 4)
	assert.Equal(t, "问题一", msgs[1]["content"])
	assert.Equal(t, "第一个回答。", msgs[2]["content"], "history is stripped of markers")
	assert.Equal(t, "问题二", msgs[3]["content"])
}

func TestSubmitValidation(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	a := newAgent(t, Config{Store: st, Model: extractive.New()})
	tests := []struct {
		name string
		turn Turn
	}{
		{"no session", Turn{Text: "hi"}},
		{"empty text", Turn{SessionID: sid, Text: "  \n"}},
		{"too long", Turn{SessionID: sid, Text: strings.Repeat("字", MaxTurnBytes/3+1)}},
		{"invalid utf-8", Turn{SessionID: sid, Text: "abc\xff"}},
		{"long session id", Turn{SessionID: strings.Repeat("s", 300), Text: "hi"}},
		{"metadata not an object", Turn{SessionID: sid, Text: "hi", Metadata: json.RawMessage(`[1]`)}},
		{"metadata not JSON", Turn{SessionID: sid, Text: "hi", Metadata: json.RawMessage(`{"a":`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Submit(context.Background(), tc.turn)
			require.ErrorIs(t, err, ErrBadTurn)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := a.Submit(ctx, Turn{SessionID: sid, Text: "hi"})
	require.ErrorIs(t, err, context.Canceled)

	// A turn's metadata is stored with its USER message.
	out := run(t, a, sid, "年假", nil)
	h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "年假", Metadata: json.RawMessage(`{"regenerateOf":` + fmt.Sprint(out.UserMessageID) + `}`)})
	require.NoError(t, err)
	out2 := wait(t, h)
	um, err := st.GetMessage(context.Background(), out2.UserMessageID)
	require.NoError(t, err)
	require.JSONEq(t, `{"regenerateOf":`+fmt.Sprint(out.UserMessageID)+`}`, string(um.Metadata))

	// Exactly the limit is fine.
	h, err = a.Submit(context.Background(), Turn{SessionID: sid, Text: strings.Repeat("a", MaxTurnBytes)})
	require.NoError(t, err)
	wait(t, h)
}

func TestUnknownSessionFails(t *testing.T) {
	st := openStore(t)
	a := newAgent(t, Config{Store: st, Model: extractive.New()})
	rec := &recorder{}
	out := run(t, a, "no-such-session", "hi", rec.sink)
	assert.Equal(t, store.PhaseFailed, out.Phase)
	assert.Contains(t, out.Error, "保存对话失败")
	checkEventOrder(t, rec.all())
}

func TestNewValidation(t *testing.T) {
	st := openStore(t)
	search, _ := searchTool()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no store", Config{Model: extractive.New()}},
		{"no model", Config{Store: st}},
		{"bad lang", Config{Store: st, Model: extractive.New(), Lang: "fr"}},
		{"duplicate tool", Config{Store: st, Model: extractive.New(), Tools: []Tool{search, search}}},
		{"nil hook", Config{Store: st, Model: extractive.New(), Hooks: []Hook{nil}}},
		{"bad schema", Config{Store: st, Model: extractive.New(), Tools: []Tool{badSchemaTool{}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			require.Error(t, err)
		})
	}
}

type badSchemaTool struct{}

func (badSchemaTool) Spec() ToolSpec {
	return ToolSpec{Name: "bad", Parameters: json.RawMessage(`["not","an","object"]`)}
}
func (badSchemaTool) Call(context.Context, string) (string, error) { return "{}", nil }

package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

func TestExtractiveThroughLoop(t *testing.T) {
	search, _ := searchTool(
		hit{"电子发票抬头开错了怎么办", "https://kb.example.com/kb/einvoice", "已经开具的电子发票不能直接修改。抬头写错时，唯一正确的做法是：先申请红冲原发票，再按正确抬头重新开具。"},
		hit{"年假制度", "https://kb.example.com/kb/leave", "员工入职满一年后每年享有 5 天带薪年假。"},
	)
	failing := funcTool{name: "web_search", fn: func(ctx context.Context, args string) (string, error) {
		return `{"error":"搜索服务暂时不可用"}`, nil
	}}
	tests := []struct {
		name      string
		tool      Tool
		question  string
		cited     []string
		contains  string
		deltasMin int
	}{
		{name: "invoice", tool: search, question: "电子发票抬头写错了怎么办？", cited: []string{"https://kb.example.com/kb/einvoice"}, contains: "红冲", deltasMin: 4},
		{name: "unrelated", tool: search, question: "火星探测器用什么推进剂？", contains: "没有在检索到的资料中找到"},
		{name: "search failed", tool: failing, question: "年假有几天？", contains: "检索失败：搜索服务暂时不可用"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t)
			sid := newSession(t, st)
			a := newAgent(t, Config{Store: st, Model: extractive.New(), Tools: []Tool{tc.tool}})
			assert.Equal(t, "extractive (no LLM)", a.ModelName())
			rec := &recorder{}
			out := run(t, a, sid, tc.question, rec.sink)
			require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
			assert.Contains(t, out.Content, tc.contains)
			var urls []string
			for _, c := range out.Citations {
				urls = append(urls, c.URL)
			}
			assert.Equal(t, tc.cited, urls)
			evs := rec.all()
			checkEventOrder(t, evs)
			checkDeltas(t, evs)
			deltas := finalRoundDeltas(evs)
			assert.GreaterOrEqual(t, len(deltas), tc.deltasMin)
			// The model streams phrases of at most 24 runes and cuts every marker in two; a delta is
			// one phrase, plus the marker beginning "[^n" the Stripper held back from the last one.
			for _, d := range deltas {
				assert.LessOrEqual(t, utf8.RuneCountInString(d), 24+2+citations.MaxDigits)
			}
			assert.Equal(t, citations.Strip(out.Content), strings.Join(deltas, ""))
			var started []Event
			for _, ev := range evs {
				if ev.Type == EventToolStarted {
					started = append(started, ev)
				}
			}
			require.Len(t, started, 1)
			assert.Equal(t, "call_1", started[0].CallID)
			// The search asks the question as asked, followed by the lexicon's synonyms for it.
			var args struct{ Query string }
			require.NoError(t, json.Unmarshal([]byte(started[0].Arguments), &args))
			assert.True(t, strings.HasPrefix(args.Query, tc.question), args.Query)
		})
	}
}

func TestExtractiveDeterministic(t *testing.T) {
	req := ModelRequest{Messages: []ChatMessage{
		{Role: "user", Content: "电子发票抬头写错了怎么办？"},
		{Role: "assistant", ToolCalls: []store.ToolCall{{ID: "call_1", Name: "web_search"}}},
		{Role: "tool", Name: "web_search", ToolCallID: "call_1", Content: `{"query":"q","results":[{"title":"A","url":"https://a.example/","content":"抬头写错时应先红冲。发票抬头错误需重开。无关句子在这里。","ref":1}],"total_results":1}`},
	}}
	var first string
	for i := 0; i < 5; i++ {
		var b strings.Builder
		resp, err := extractive.New().Generate(context.Background(), req, func(d string) { b.WriteString(d) })
		require.NoError(t, err)
		assert.Equal(t, resp.Text, b.String())
		if i == 0 {
			first = resp.Text
		}
		assert.Equal(t, first, resp.Text)
	}
	assert.Contains(t, first, "[^1^]")
	assert.NotContains(t, first, "无关句子")

	// Cancellation stops streaming.
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := extractive.New().Generate(ctx, req, func(string) {
		n++
		if n == 2 {
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 2, n)
}

package gateway

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations/markdown"
	"github.com/citegate/citegate/store"
)

func TestDisplayPrefix(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"根据员工手册", "根据员工手册"},
		{"## 年假", "## 年假"},
		{"根据**员工", "根据"},
		{"根据**员工手册**，年假", "根据**员工手册**，年假"},
		{"用 `go te", "用 "},
		{"用 `go test` 运行", "用 `go test` 运行"},
		{"删掉~~旧", "删掉"},
		{"见 [示例", "见 "},
		{"见 [示例](https://exa", "见 "},
		{"见 ![图](https://exa", "见 "},
		{"见 [示例](https://example.com/a) 和", "见 [示例](https://example.com/a) 和"},
		{"第一段\n| 工龄 | 年", "第一段\n"},
		{"第一段\n| 工龄 | 年假 |\n", "第一段\n"},
		{"第一段\n| 工龄 | 年假 |\n| --", "第一段\n"},
		{"第一段\n| 工龄 | 年假 |\n| --- | --- |\n", "第一段\n| 工龄 | 年假 |\n| --- | --- |\n"},
		{"| a | b |\n| --- | --- |\n| 1 | 2 |\n| 3 |", "| a | b |\n| --- | --- |\n| 1 | 2 |\n"},
		{"| a | b |\n| --- | --- |\n| 1 | 2 |\n后面", "| a | b |\n| --- | --- |\n| 1 | 2 |\n后面"},
		{"标题\n--", "标题\n"},
		{"标题\n-", "标题\n"},
		{"- 一项", "- 一项"},
		{"```go", ""},
		{"代码：\n```go\nfunc main() { **x", "代码：\n```go\nfunc main() { **x"},
		{"```\na\n```\n后面 **粗", "```\na\n```\n后面 "},
		{"~~~\n| 不是表格", "~~~\n| 不是表格"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, displayPrefix(tc.in), "%q", tc.in)
	}
}

// TestDisplayPrefixOfEveryPrefix: for every prefix of a realistic answer the shown part is a prefix
// of what arrived, and once the answer is complete everything shows.
func TestDisplayPrefixOfEveryPrefix(t *testing.T) {
	answer := "## 年假天数\n\n根据**员工手册**，年假按工龄计算；见 [制度](https://example.com/a)。\n\n" +
		"| 工龄 | 年假 |\n| --- | --- |\n| 1–10 年 | 5 天 |\n\n1. 登录系统\n2. 提交 `请假` 单\n\n```bash\ncurl -s x\n```\n"
	for i := range len(answer) + 1 {
		if !utf8.ValidString(answer[:i]) {
			continue
		}
		p := displayPrefix(answer[:i])
		require.True(t, strings.HasPrefix(answer[:i], p), "at %d: %q is not a prefix", i, p)
	}
	assert.Equal(t, answer, displayPrefix(answer))
}

func FuzzDisplayPrefix(f *testing.F) {
	for _, s := range []string{"", "**a", "| a |\n| - |\n", "```go\n**", "[x](https://e", "a\n--", "`a` **b** [c]("} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := displayPrefix(s)
		if !strings.HasPrefix(s, p) {
			t.Fatalf("displayPrefix(%q) = %q, not a prefix", s, p)
		}
	})
}

// steppedModel searches once, then writes its answer in steps: each step streamed in small chunks,
// then a wait until the test releases the next step. The test sees every step's rendering before
// the answer goes on, so nothing depends on timing.
type steppedModel struct {
	steps []string
	next  chan struct{}
}

func (m *steppedModel) Name() string { return "stepped" }

func (m *steppedModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	if req.Messages[len(req.Messages)-1].Role == "user" {
		return agent.ModelResponse{ToolCalls: []store.ToolCall{{ID: "call_1", Name: "web_search", Arguments: `{"query":"年假"}`}}}, nil
	}
	var all strings.Builder
	for i, step := range m.steps {
		if i > 0 {
			select {
			case <-m.next:
			case <-ctx.Done():
				return agent.ModelResponse{Text: all.String()}, ctx.Err()
			}
		}
		r := []rune(step)
		for j := 0; j < len(r); j += 2 {
			onDelta(string(r[j:min(j+2, len(r))]))
		}
		all.WriteString(step)
	}
	return agent.ModelResponse{Text: all.String()}, nil
}

// TestWSAnswerHTMLStreamsFormatted: while the answer streams, answer.html carries its sanitised
// rendering so far: headings, emphasis and tables formatted, no marker, no raw markdown of an
// unfinished construct, no unverified link; none arrives after answer.final.
func TestWSAnswerHTMLStreamsFormatted(t *testing.T) {
	m := &steppedModel{next: make(chan struct{}), steps: []string{
		"## 年假天数\n\n根据**员工",
		"手册**，年假按工龄计算[^1^]。\n\n| 工龄 | 年假 |\n",
		"| --- | --- |\n| 1 年 | 5 天 |\n\n见 https://evil.example.net/x 或 [示例](https://example.com/a",
		") 了解更多。\n",
		"以上。\n",
	}}
	e := newEnv(t, func(_ *Config, a *agentCfg) { a.Model = m })
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "年假有几天？"})

	// htmlUntil reads frames until an answer.html satisfies ok, checking every one on the way.
	htmlUntil := func(what string, ok func(html string) bool) string {
		t.Helper()
		for {
			f := ws.next()
			require.NotEqual(t, "answer.final", f["type"], "answer.final came before %s", what)
			if f["type"] != "answer.html" {
				continue
			}
			html, _ := f["html"].(string)
			require.NotEmpty(t, f["runId"])
			require.NotEmpty(t, f["sessionId"])
			for _, bad := range []string{"[^", "^]", "##", "**", "| ---", "evil.example.net"} {
				require.NotContains(t, html, bad, "streaming html shows %q: %s", bad, html)
			}
			if ok(html) {
				return html
			}
		}
	}
	html := htmlUntil("the heading", func(h string) bool { return strings.Contains(h, "根据") })
	assert.Contains(t, html, "<h2")
	assert.NotContains(t, html, "员工", "unclosed strong is held back")
	m.next <- struct{}{}
	html = htmlUntil("the strong text", func(h string) bool { return strings.Contains(h, "员工手册") })
	assert.Contains(t, html, "<strong>员工手册</strong>")
	assert.NotContains(t, html, "| 工龄", "a table header waits for its delimiter row")
	assert.NotContains(t, html, "<table")
	m.next <- struct{}{}
	html = htmlUntil("the table", func(h string) bool { return strings.Contains(h, "<table") && strings.Contains(h, "见") })
	assert.Contains(t, html, "<td>5 天</td>")
	assert.NotContains(t, html, "示例", "a link whose target is still arriving is held back")
	m.next <- struct{}{}
	html = htmlUntil("the link", func(h string) bool { return strings.Contains(h, "了解更多") })
	assert.Contains(t, html, `href="https://example.com/a"`, "a verified link shows")
	assert.Contains(t, html, "〔链接未经核实，已隐藏〕", "an unverified one is hidden")
	m.next <- struct{}{}

	rest := ws.until("run.finished")
	final := -1
	for i, f := range rest {
		if f["type"] == "answer.final" {
			final = i
		}
		if final >= 0 {
			assert.NotEqual(t, "answer.html", f["type"], "no answer.html after answer.final")
		}
	}
	require.GreaterOrEqual(t, final, 0)
	ws.quiet(300 * time.Millisecond)
}

// TestLiveAnswersPacing drives the coalescing with a manual scheduler: the first delta renders at
// once, deltas while a render is pending join it, and the wait before the next render grows with
// the last render's cost (renderDuty) and the frame size (maxHTMLRate), never below minRenderGap.
func TestLiveAnswersPacing(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	ws := e.mustWS(tok)
	h := e.srv.hub
	sess := e.session(u, "t")
	h.owners.set(sess.ID, u.ID)
	waitClients(t, h)

	var pending []func()
	var waits []time.Duration
	clock := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newLiveAnswers(h)
	l.after = func(d time.Duration, f func()) { waits = append(waits, d); pending = append(pending, f) }
	l.now = func() time.Time { return clock }
	fire := func() {
		t.Helper()
		require.Len(t, pending, 1, "exactly one render scheduled")
		f := pending[0]
		pending = pending[:0]
		f()
	}
	delta := func(s string) {
		l.observe(agent.Event{Type: agent.EventAnswerDelta, SessionID: sess.ID, RunID: "r1", Text: s})
	}

	delta("第一句。")
	require.Equal(t, []time.Duration{0}, waits, "leading edge")
	delta("第二句。")
	delta("第三句。")
	assert.Len(t, pending, 1, "deltas while a render is pending join it")
	fire()
	f := ws.next()
	require.Equal(t, "answer.html", f["type"])
	assert.Contains(t, f["html"], "第一句。第二句。第三句。")
	assert.Empty(t, pending, "nothing new: no render scheduled")

	// A new delta right away waits for the gap.
	delta("第四句。")
	require.Len(t, waits, 2)
	assert.Equal(t, minRenderGap, waits[1])
	// A slow render (the clock advances while it runs) stretches the next gap to renderDuty × cost.
	l.now = func() time.Time { c := clock; clock = clock.Add(10 * time.Millisecond); return c }
	fire()
	assert.Contains(t, ws.next()["html"], "第四句。")
	l.now = func() time.Time { return clock }
	delta("第五句。")
	require.Len(t, waits, 3)
	assert.Greater(t, waits[2], minRenderGap)
	assert.LessOrEqual(t, waits[2], renderDuty*10*time.Millisecond)

	// The final answer ends it: the pending render sends nothing and schedules nothing.
	l.observe(agent.Event{Type: agent.EventAnswerFinal, SessionID: sess.ID, RunID: "r1"})
	fire()
	assert.Empty(t, pending)
	ws.quiet(200 * time.Millisecond)

	// Big frames are paced by bytes: 64 KiB of html waits about a second.
	delta2 := func(s string) {
		l.observe(agent.Event{Type: agent.EventAnswerDelta, SessionID: sess.ID, RunID: "r2", Text: s})
	}
	delta2(strings.Repeat("长段落文字。", 4000) + "\n")
	fire()
	assert.Equal(t, "answer.html", ws.next()["type"])
	delta2("再一句。")
	assert.GreaterOrEqual(t, waits[len(waits)-1], 900*time.Millisecond)
}

// waitClients waits until the hub has registered the test's connection.
func waitClients(t *testing.T, h *hub) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !h.anyClients() {
		require.True(t, time.Now().Before(deadline), "no websocket client registered")
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkStreamingRender compares, for one 6 KB answer streamed in 3-rune deltas, the render
// work of answer.html with coalescing (what the server does: at most one render per gap) against
// rendering after every delta (the naive approach), and reports the final render alone as the
// baseline unit.
func BenchmarkStreamingRender(b *testing.B) {
	answer := strings.Repeat("## 年假天数\n\n根据**员工手册**，年假天数按工龄计算；申请需提前三天在系统提交。\n\n| 工龄 | 年假 |\n| --- | --- |\n| 1–10 年 | 5 天 |\n\n- 登录系统\n- 提交审批\n\n", 16)
	r := []rune(answer)
	var deltas []string
	for i := 0; i < len(r); i += 3 {
		deltas = append(deltas, string(r[i:min(i+3, len(r))]))
	}
	render := func(s string) int {
		return len(markdown.RenderAnswer(displayPrefix(s), nil, markdown.Options{Lang: "zh"}).HTML)
	}
	b.Run("final-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			render(answer)
		}
	})
	b.Run("every-delta", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var acc strings.Builder
			for _, d := range deltas {
				acc.WriteString(d)
				render(acc.String())
			}
		}
		b.ReportMetric(float64(len(deltas)), "renders/answer")
	})
	// Coalesced at a model speed of 50 deltas per second (a fast model) and the minimum gap: one
	// render per 5 deltas. Slower renders stretch the gap further (renderDuty).
	per := int(minRenderGap / (20 * time.Millisecond))
	b.Run("coalesced", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			var acc strings.Builder
			n = 0
			for i, d := range deltas {
				acc.WriteString(d)
				if i%per == 0 || i == len(deltas)-1 {
					render(acc.String())
					n++
				}
			}
		}
		b.ReportMetric(float64(n), "renders/answer")
	})
}

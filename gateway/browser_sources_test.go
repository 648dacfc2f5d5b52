package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// seedSourcesChat stores a question and an answer citing two corpus pages (with retrieval time and
// lead, as a run records them), with an ordered list starting at 3 and a Go code block.
func seedSourcesChat(t *testing.T, stack *browserStack) string {
	t.Helper()
	ctx := context.Background()
	s, err := stack.Store.CreateSession(ctx, store.Session{UserID: stack.User.ID, Channel: "desktop", Title: "来源卡片"})
	require.NoError(t, err)
	kb := stack.URL + "/kb/"
	meta := json.RawMessage(`{"citations":[` +
		`{"n":1,"url":"` + kb + `annual-leave","title":"年假规定与申请方法","retrievedAt":"2026-03-01T00:30:00Z","lead":"年假天数\n工龄 · 天数\n1-10 年 · 5 天"},` +
		`{"n":2,"url":"` + kb + `expense-reimbursement","title":"费用报销","retrievedAt":"2026-03-01T00:31:00Z","lead":"报销须在 30 天内提交"}],"links":{"hidden":0,"allowed":[]}}`)
	answer := "年假按工龄计算[^1^]，报销另有规定[^2^]。\n\n3. 第三步：提交审批\n4. 第四步：等待通过\n\n```go\nfunc main() { fmt.Println(\"年假\") }\n```\n"
	for _, m := range []store.Message{
		{SessionID: s.ID, Role: store.RoleUser, Content: "年假几天？"},
		{SessionID: s.ID, Role: store.RoleAssistant, Content: answer, Metadata: meta},
	} {
		_, err := stack.Store.AppendMessage(ctx, m)
		require.NoError(t, err)
	}
	return s.ID
}

// TestBrowserSources: the source card on keyboard focus, hover and Esc; the sources list names
// corpus pages by title, not 127.0.0.1; a list keeps its start and Go code is highlighted with
// colours from the light and the dark palette; the excerpt panel renders markdown beside the
// at every layout the accessibility audit passes.
func TestBrowserSources(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	id := seedSourcesChat(t, stack)
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.do(t, 30*time.Second, chromedp.Navigate(stack.URL+"/#s="+id))
	waitConnected(t, tb)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages sup.cite-ref a').length === 2`, "answer renders")

	assert.Equal(t, "3", evalJS[string](t, tb, `document.querySelector('#messages .bubble ol').getAttribute('start')`))
	assert.True(t, evalJS[bool](t, tb, `!!document.querySelector('#messages pre.chroma code.language-go span.kd')`), "Go is highlighted")
	assert.Equal(t, []string{"知识库", "费用报销流程"}, evalJS[[]string](t, tb, `[...document.querySelectorAll('#messages li.source .src-domain')].map((e) => e.textContent)`))

	colours := map[string]string{}
	eachLayout(t, tb, func(t *testing.T, l layout) {
		colours[l.Name] = evalJS[string](t, tb, `getComputedStyle(document.querySelector('#messages span.kd')).color`)

		// Keyboard: focus the first superscript; the card describes it; Esc closes it.
		evalJS[bool](t, tb, `(document.activeElement && document.activeElement.blur(), document.querySelector('#messages sup.cite-ref a').focus(), true)`)
		waitJS(t, tb, 30*time.Second, `!document.getElementById('src-card').hidden`, "card opens on focus")
		card := evalJS[map[string]any](t, tb, `(() => { const c = document.getElementById('src-card'); const r = c.getBoundingClientRect();
			return {title: c.querySelector('.src-card-title').textContent, site: c.querySelector('.src-domain').textContent,
				time: (c.querySelector('.src-card-time') || {}).textContent || '', lead: c.querySelector('.src-card-lead').textContent,
				described: document.activeElement.getAttribute('aria-describedby'), inView: r.left >= 0 && r.right <= innerWidth && r.top >= 0 && r.bottom <= innerHeight}; })()`)
		assert.Equal(t, "年假规定与申请方法", card["title"])
		assert.Equal(t, "知识库", card["site"])
		assert.Contains(t, card["time"], "2026")
		assert.Equal(t, "年假天数\n工龄 · 天数\n1-10 年 · 5 天", card["lead"])
		assert.Equal(t, "src-card", card["described"])
		assert.Equal(t, true, card["inView"], "the card fits the screen")
		auditA11y(t, tb, "source card "+l.Name)
		shot(t, tb, "source-card-"+l.Name)
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\x1b"))
		waitJS(t, tb, 30*time.Second, `document.getElementById('src-card').hidden && !document.activeElement.hasAttribute('aria-describedby')`, "Esc closes the card")

	})
	assert.NotEqual(t, colours["desktop-light"], colours["desktop-dark"], "dark mode has its own palette")

	// Hover with the mouse shows the card too.
	pos := evalJS[map[string]float64](t, tb, `(() => { const r = document.querySelectorAll('#messages sup.cite-ref a')[1].getBoundingClientRect(); return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()`)
	tb.do(t, 15*time.Second, chromedp.MouseEvent("mouseMoved", pos["x"], pos["y"]))
	waitJS(t, tb, 30*time.Second, `!document.getElementById('src-card').hidden && document.querySelector('#src-card .src-card-title').textContent === '费用报销'`, "card opens on hover")
}

// TestBrowserToolLinesAfterReopen: the tool lines a live run shows ("已搜索 …") are still there when
// the chat is opened again; the run's excerpt panel renders markdown beside the answer (1280 px)
// or as a bottom sheet (375 px), light and dark, with the accessibility audit passing.
func TestBrowserToolLinesAfterReopen(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.do(t, 30*time.Second,
		chromedp.SetValue(chromedp.CSS("#input"), "年假有几天"),
		chromedp.Click(chromedp.CSS("#send")),
	)
	waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .msg.assistant .activity .tool.ok') && !!document.querySelector('#messages .msg.assistant sup.cite-ref')`, "live run shows its tool line and answer")
	live := evalJS[[]string](t, tb, `[...document.querySelectorAll('#messages .activity .tool')].map((e) => e.textContent)`)
	require.NotEmpty(t, live)
	waitJS(t, tb, 30*time.Second, `!!citegate.state.current && new URLSearchParams(location.search).get('s') === citegate.state.current && !citegate.state.runs.size`, "run finished")
	tb.do(t, 30*time.Second, chromedp.Reload())
	waitConnected(t, tb)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 2`, "history renders")
	reopened := evalJS[[]string](t, tb, `[...document.querySelectorAll('#messages .activity .tool')].map((e) => e.textContent)`)
	assert.Equal(t, live, reopened, "the same tool lines after reopening")
	assert.Contains(t, fmt.Sprint(reopened), "已搜索")

	eachLayout(t, tb, func(t *testing.T, l layout) {
		// The excerpt panel: markdown, not "##" and "| --- |"; beside the answer or a bottom sheet.
		evalJS[bool](t, tb, `(document.querySelector('#messages button.src-preview').click(), true)`)
		waitJS(t, tb, 15*time.Second, `!!document.querySelector('#excerpt-text.md h2, #excerpt-text.md table, #excerpt-text.md p')`, "excerpt renders as markdown")
		text := evalJS[string](t, tb, `document.getElementById('excerpt-text').textContent`)
		assert.NotContains(t, text, "## ")
		assert.NotContains(t, text, "| --- |")
		geo := evalJS[map[string]float64](t, tb, `(() => { const x = document.getElementById('excerpt').getBoundingClientRect(); const m = document.getElementById('messages').getBoundingClientRect();
			return {xl: x.left, xb: x.bottom, xw: x.width, mr: m.right, h: innerHeight, w: innerWidth}; })()`)
		if l.Width >= 1000 {
			assert.GreaterOrEqual(t, geo["xl"]+1, geo["mr"], "the panel sits beside the messages, not over them: %v", geo)
		} else {
			assert.InDelta(t, geo["h"], geo["xb"], 1, "a bottom sheet: %v", geo)
			assert.InDelta(t, geo["w"], geo["xw"], 1, "a bottom sheet spans the screen: %v", geo)
		}
		auditA11y(t, tb, "excerpt "+l.Name)
		shot(t, tb, "excerpt-"+l.Name)
		evalJS[bool](t, tb, `(document.getElementById('excerpt-close').click(), true)`)
		waitJS(t, tb, 15*time.Second, `document.getElementById('excerpt').hidden && !document.body.classList.contains('excerpt-open')`, "panel closes")
	})
}

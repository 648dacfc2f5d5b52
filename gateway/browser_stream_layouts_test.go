package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
)

// leakyModel streams an answer in gated steps like gatedModel, and writes what a careless model
// would: a markdown link and a bare URL to a host no tool retrieved, and citation markers that
// arrive in two-character pieces ("[^", "1^", "]"). A question containing "fail" fails.
type leakyModel struct {
	steps []string
	next  chan struct{}
}

func (m *leakyModel) Name() string { return "leaky test model" }

func (m *leakyModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	for _, msg := range req.Messages {
		if msg.Role == "user" && strings.Contains(msg.Content, "fail") {
			return agent.ModelResponse{}, errors.New("upstream model unavailable")
		}
	}
	return (&gatedModel{steps: m.steps, next: m.next}).Generate(ctx, req, onDelta)
}

// watchStreamJS records, on every change of the messages (a MutationObserver sees each state the
// DOM passes through, not only the ones a poll happens to sample), any unverified URL anywhere in
// the markup and any citation-marker fragment in the text. window.__leaks holds what was seen.
const watchStreamJS = `(() => {
	window.__leaks = []; window.__samples = 0; window.__streamSamples = 0;
	const m = document.getElementById('messages');
	const check = () => {
		window.__samples++;
		if (m.querySelector('.streaming')) window.__streamSamples++;
		const html = m.innerHTML, text = m.textContent;
		// The host anywhere in the markup (an href, a title), or any start of a URL or of a markdown
		// link in the text ("https://ev", "](") — the run retrieved nothing, so no URL is verified.
		const i = html.search(/evil/);
		if (i >= 0) window.__leaks.push('unverified URL: …' + html.slice(Math.max(0, i - 80), i + 40));
		const k = text.search(/https?:|\]\(|<http/);
		if (k >= 0) window.__leaks.push('URL fragment: …' + text.slice(Math.max(0, k - 40), k + 20));
		const j = text.search(/\[\^|\^\]|\^\d|\d\^/);
		if (j >= 0) window.__leaks.push('marker fragment: …' + text.slice(Math.max(0, j - 40), j + 10));
	};
	new MutationObserver(check).observe(m, {subtree: true, childList: true, characterData: true, attributes: true});
	return true;
})()`

// TestBrowserStreamingLayouts: the progressive rendering of a streaming answer at 375 px and
// 1280 px, light and dark. At every state the page passes through while the answer streams, no
// URL the run did not retrieve and no piece of a [^n^] marker is in the page (watched with a
// MutationObserver, not sampled at the end); mid-stream the answer fits the screen and the page
// passes the accessibility audit;
// on the phone, a run is stopped with the stop button and a failed run says so.
func TestBrowserStreamingLayouts(t *testing.T) {
	requireBrowser(t)
	m := &leakyModel{next: make(chan struct{}), steps: []string{
		"## 年假天数\n\n请看[官网](https://evil.example.com/login)，根据**员工手册**[^1^]，年假",
		"按工龄计算，或访问 https://evil.example.com/x 查询[^2^]。\n\n| 工龄 | 年假 |\n| --- | --- |\n| 1–10 年 | 5 天 |\n\n",
		"1. 登录 <https://evil.example.com/a>\n2. 提交审批[^1^][^2^]\n",
		"",
	}}
	stack := newBrowserStack(t, m)
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	require.True(t, evalJS[bool](t, tb, watchStreamJS))
	// The watcher itself: a leak put into the page is seen.
	require.True(t, evalJS[bool](t, tb, `(() => { const p = document.createElement('p'); p.textContent = 'https://evil.example [^1'; document.getElementById('messages').append(p); return true; })()`))
	waitJS(t, tb, 15*time.Second, `window.__leaks.length === 3`, "the watcher sees a planted URL and marker")
	require.True(t, evalJS[bool](t, tb, `(document.querySelector('#messages > p:last-child').remove(), window.__leaks = [], true)`))

	const streaming = `document.querySelector('#messages .msg.assistant:last-child .streaming')`
	const answers = `document.querySelectorAll('#messages .msg.assistant').length`
	noLeaks := func(t *testing.T, what string) {
		t.Helper()
		leaks := evalJS[[]string](t, tb, `window.__leaks`)
		if len(leaks) > 5 {
			leaks = leaks[:5]
		}
		assert.Empty(t, leaks, "%s: an unverified URL or a marker fragment was in the page", what)
	}
	eachLayout(t, tb, func(t *testing.T, l layout) {
		before := evalJS[int](t, tb, answers)
		samples := evalJS[int](t, tb, `window.__streamSamples`)
		tb.do(t, 15*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "年假有几天？"), chromedp.Click(chromedp.CSS("#send")))
		waitJS(t, tb, 30*time.Second, answers+` === `+itoa(uint64(before+1))+` && !!`+streaming+` && !!`+streaming+`.querySelector('h2') && `+streaming+`.textContent.includes('员工手册')`, "the first step streams in")
		assert.Contains(t, evalJS[string](t, tb, streaming+`.textContent`), "请看官网", "the link's text stays")
		noLeaks(t, "first step")
		release(t, m.next)
		waitJS(t, tb, 30*time.Second, `!!`+streaming+` && `+streaming+`.querySelectorAll('td').length === 2`, "the table streams in")
		noLeaks(t, "table step")
		// Mid-stream: the run is paused between two steps, its text on screen, the stop button up.
		require.False(t, evalJS[bool](t, tb, `document.getElementById('cancel').hidden`))
		fits := evalJS[bool](t, tb, `(() => { const r = `+streaming+`.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth + 1; })()`)
		assert.True(t, fits, "the streaming answer fits the screen at %s", l.Name)
		// The audit runs at both widths and in both schemes (phone dark, desktop light): the layout
		// depends on the width, the colours on the scheme.
		if l == phoneDark || l == desktopLight {
			auditA11y(t, tb, "streaming answer "+l.Name)
		}
		if l == phoneDark {
			screenshot(t, tb, "streaming-"+l.Name)
		}
		release(t, m.next)
		waitJS(t, tb, 30*time.Second, `!!`+streaming+` && `+streaming+`.querySelectorAll('ol li').length === 2`, "the list streams in")
		noLeaks(t, "list step")
		release(t, m.next)
		waitJS(t, tb, 30*time.Second, `!document.querySelector('#messages .streaming') && document.getElementById('cancel').hidden && !!document.querySelector('#messages .msg.assistant:last-child[data-id]')`, "the answer completes")
		noLeaks(t, "final answer")
		final := evalJS[string](t, tb, `document.querySelector('#messages .msg.assistant:last-child .bubble').textContent`)
		assert.Contains(t, final, "请看官网")
		assert.Contains(t, final, "提交审批")
		assert.GreaterOrEqual(t, evalJS[int](t, tb, `window.__streamSamples`), samples+3, "the watcher saw each of the three streamed steps")
	})

	// On the phone, in the dark: stop a run mid-way, then a run that fails.
	tb.setLayout(t, phoneDark)
	tb.do(t, 15*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "请停下"), chromedp.Click(chromedp.CSS("#send")))
	waitJS(t, tb, 30*time.Second, `!!`+streaming+` && `+streaming+`.textContent.includes('员工手册')`, "a run streams on the phone")
	box := evalJS[map[string]float64](t, tb, `(() => { const r = document.getElementById('cancel').getBoundingClientRect(); return {l: r.left, r: r.right, b: r.bottom, w: innerWidth, h: innerHeight}; })()`)
	assert.True(t, box["l"] >= 0 && box["r"] <= box["w"]+1 && box["b"] <= box["h"]+1, "the stop button is on screen: %v", box)
	evalJS[bool](t, tb, `(document.getElementById('input').focus(), true)`)
	tabTo(t, tb, "#cancel", false, 4)
	press(t, tb, "\r")
	waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .msg.assistant:last-child .status.cancelled') && document.getElementById('cancel').hidden && !document.getElementById('send').disabled`, "the stopped run is marked")
	assert.Equal(t, "已停止", evalJS[string](t, tb, `document.querySelector('#messages .msg.assistant:last-child .status.cancelled').textContent`))
	noLeaks(t, "stopped run")

	tb.do(t, 15*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "please fail"), chromedp.Click(chromedp.CSS("#send")))
	waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .msg.assistant:last-child .status.failed')`, "the failed run is marked")
	failed := evalJS[string](t, tb, `document.querySelector('#messages .msg.assistant:last-child .status.failed').textContent`)
	assert.Contains(t, failed, "回答失败")
	assert.NotContains(t, failed, "upstream model unavailable")
	auditA11y(t, tb, "stopped and failed runs phone-dark")
	screenshot(t, tb, "run-cancelled-failed-phone-dark")
	tb.setLayout(t, desktopLight)
}

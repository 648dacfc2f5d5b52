package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// renderedAnswer is what a reader sees of one answer: its superscripts and its sources section.
type renderedAnswer struct {
	Sups []struct {
		Href string `json:"href"`
		N    string `json:"n"`
		K    string `json:"k"`
		Text string `json:"text"`
	} `json:"sups"`
	Sources []struct {
		ID     string `json:"id"`
		N      string `json:"n"`
		Num    string `json:"num"`
		Href   string `json:"href"`
		Title  string `json:"title"`
		Domain string `json:"domain"`
		Target string `json:"target"`
		Rel    string `json:"rel"`
	} `json:"sources"`
	Summary string `json:"summary"`
	Text    string `json:"text"`
}

// readAnswer collects the rendered answer inside the last element matching sel.
func readAnswer(t *testing.T, tb *tab, sel string) renderedAnswer {
	t.Helper()
	js := `(() => {
		const all = document.querySelectorAll(` + jsString(sel) + `);
		const root = all[all.length - 1];
		if (!root) return null;
		const sups = [...root.querySelectorAll('sup.cite-ref a')].map(a => ({
			href: a.getAttribute('href'), n: a.dataset.n, k: a.dataset.k, text: a.textContent }));
		const sources = [...root.querySelectorAll('li.source')].map(li => {
			const a = li.querySelector('a');
			const d = li.querySelector('.src-domain');
			return { id: li.id, n: li.dataset.n, num: li.querySelector('.src-num').textContent, href: a.href,
				title: a.textContent, domain: d ? d.textContent : '', target: a.target, rel: a.rel };
		});
		const s = root.querySelector('details.sources summary');
		return { sups, sources, summary: s ? s.textContent : '', text: root.innerText };
	})()`
	raw := evalJS[json.RawMessage](t, tb, js)
	var out renderedAnswer
	require.NoError(t, json.Unmarshal(raw, &out), "decode %s", raw)
	return out
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// assertAnswer checks the citation rendering rules on what the browser shows.
func assertAnswer(t *testing.T, a renderedAnswer, kbPrefix string) {
	t.Helper()
	require.NotEmpty(t, a.Sups, "the answer shows superscripts")
	require.NotEmpty(t, a.Sources, "the answer shows a sources section")
	assert.Equal(t, fmt.Sprintf("来源 %d", len(a.Sources)), a.Summary)
	assert.NotContains(t, a.Text, "[^", "no raw marker reaches the reader")
	ids := map[string]string{} // entry id → display number
	for i, s := range a.Sources {
		assert.Equal(t, fmt.Sprint(i+1), s.Num, "entries are numbered 1..k")
		assert.True(t, strings.HasPrefix(s.Href, kbPrefix), "source %q links to the local corpus %s", s.Href, kbPrefix)
		assert.NotEmpty(t, s.Title)
		assert.Equal(t, "_blank", s.Target)
		assert.Contains(t, s.Rel, "noopener")
		assert.Contains(t, s.Rel, "noreferrer")
		ids[s.ID] = s.Num
	}
	for _, sup := range a.Sups {
		assert.Equal(t, sup.K, sup.Text, "superscripts show display numbers")
		num, ok := ids[strings.TrimPrefix(sup.Href, "#")]
		if assert.True(t, ok, "superscript %s points at an entry", sup.Href) {
			assert.Equal(t, sup.K, num)
		}
	}
}

// TestBrowserChatShareFlow drives the desktop view in Chromium: log in with the form, ask on the
// offline default stack, check superscripts and 来源, flash an entry, open an excerpt, share, and
// read the share with JavaScript disabled.
func TestBrowserChatShareFlow(t *testing.T) {
	requireBrowser(t) // skip before building the stack when there is no browser
	stack := newBrowserStack(t, nil)
	browser := newBrowser(t)
	tb := newTab(t, browser, false)
	start := time.Now()

	// Log in through the form (no token in the URL).
	tb.do(t, 15*time.Second,
		chromedp.Navigate(stack.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
	)
	screenshot(t, tb, "login")
	tb.do(t, 15*time.Second,
		chromedp.SendKeys(chromedp.CSS("#token"), stack.Token),
		chromedp.Click(chromedp.CSS("form.login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#input")),
	)
	waitJS(t, tb, 10*time.Second, `document.getElementById('conn').textContent === '已连接'`, "websocket connects")
	assert.Equal(t, "zh-CN", evalJS[string](t, tb, `document.documentElement.lang`))

	const question = "电子发票抬头写错了怎么办？"
	tb.do(t, 10*time.Second,
		chromedp.SetValue(chromedp.CSS("#input"), question),
		chromedp.Click(chromedp.CSS("#send")),
	)
	waitJS(t, tb, 60*time.Second,
		`!!document.querySelector('#messages .msg.assistant details.sources li.source') && document.getElementById('cancel').hidden`,
		"the answer arrives with its sources")
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('#messages .msg.user').innerText`), question)
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('#messages .msg.assistant .activity').innerText`), "已搜索")
	assert.Zero(t, evalJS[int](t, tb, `document.querySelectorAll('#messages .streaming').length`), "streamed text was replaced by the rendered answer")
	assert.Equal(t, question, evalJS[string](t, tb, `document.getElementById('chat-title').textContent`))

	chat := readAnswer(t, tb, "#messages .msg.assistant")
	assertAnswer(t, chat, stack.URL+"/kb/")

	// The page shows exactly the stored, verified citations.
	var sessions struct {
		Sessions []struct{ ID string } `json:"sessions"`
	}
	require.Equal(t, http.StatusOK, stack.api(t, http.MethodGet, "/api/sessions", &sessions))
	require.Len(t, sessions.Sessions, 1)
	var hist struct {
		Messages []struct {
			Role      string               `json:"role"`
			Citations []citations.Citation `json:"citations"`
		} `json:"messages"`
	}
	require.Equal(t, http.StatusOK, stack.api(t, http.MethodGet, "/api/sessions/"+sessions.Sessions[0].ID+"/messages", &hist))
	require.Len(t, hist.Messages, 2)
	stored := hist.Messages[1].Citations
	require.Len(t, chat.Sources, len(stored))
	for i, c := range stored {
		assert.Equal(t, c.URL, chat.Sources[i].Href)
		assert.Equal(t, fmt.Sprint(c.N), chat.Sources[i].N)
	}
	screenshot(t, tb, "chat-answer")

	// Clicking a superscript scrolls to its entry and flashes it for about 1.6 s.
	firstRef := chat.Sups[0].Href
	tb.do(t, 10*time.Second, chromedp.Click(chromedp.CSS("#messages .msg.assistant sup.cite-ref a")))
	entry := `document.getElementById(` + jsString(strings.TrimPrefix(firstRef, "#")) + `)`
	assert.True(t, evalJS[bool](t, tb, entry+`.classList.contains('cite-flash')`), "entry is highlighted after the click")
	flashed := time.Now()
	screenshot(t, tb, "chat-cite-flash")
	waitJS(t, tb, 4*time.Second, `!`+entry+`.classList.contains('cite-flash')`, "highlight ends")
	assert.Greater(t, time.Since(flashed), 900*time.Millisecond, "highlight lasts about 1.6 s")
	rect := evalJS[map[string]float64](t, tb, `(() => { const r = `+entry+`.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, h: innerHeight}; })()`)
	assert.True(t, rect["top"] >= 0 && rect["bottom"] <= rect["h"], "the entry was scrolled into view: %v", rect)

	// 摘录: the excerpt the model was given, shown as text.
	tb.do(t, 10*time.Second, chromedp.Click(chromedp.CSS("#messages .msg.assistant button.src-preview")))
	waitJS(t, tb, 10*time.Second, `!document.getElementById('excerpt').hidden && document.getElementById('excerpt-text').textContent.length > 0`, "excerpt shows")
	assert.Equal(t, chat.Sources[0].Title, evalJS[string](t, tb, `document.getElementById('excerpt-title').textContent`))
	screenshot(t, tb, "chat-excerpt")
	tb.do(t, 5*time.Second, chromedp.Click(chromedp.CSS("#excerpt-close")))

	// Dark mode follows the system preference.
	light := evalJS[string](t, tb, `getComputedStyle(document.body).backgroundColor`)
	tb.do(t, 5*time.Second, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
		})
		return err
	}))
	dark := evalJS[string](t, tb, `getComputedStyle(document.body).backgroundColor`)
	assert.NotEqual(t, light, dark)
	assert.Equal(t, "rgb(20, 23, 29)", dark)
	screenshot(t, tb, "chat-dark")

	// Share and read the share with JavaScript disabled.
	tb.do(t, 10*time.Second, chromedp.Click(chromedp.CSS("#share-btn")))
	waitJS(t, tb, 10*time.Second, `!document.getElementById('share-box').hidden && document.getElementById('share-url').value !== ''`, "share link shows")
	shareURL := evalJS[string](t, tb, `document.getElementById('share-url').value`)
	require.True(t, strings.HasPrefix(shareURL, stack.URL+"/s/"), shareURL)

	reader := newTab(t, browser, true)
	reader.do(t, 15*time.Second,
		chromedp.Navigate(shareURL),
		chromedp.WaitVisible(chromedp.CSS("details.sources")),
	)
	shared := readAnswer(t, reader, ".msg.assistant")
	assertAnswer(t, shared, stack.URL+"/kb/")
	assert.Equal(t, chat.Sources, shared.Sources, "the share shows the same sources")
	require.Len(t, shared.Sups, len(chat.Sups))
	for i := range chat.Sups {
		assert.Equal(t, chat.Sups[i].K, shared.Sups[i].K)
		assert.Equal(t, chat.Sups[i].N, shared.Sups[i].N)
	}
	assert.Zero(t, evalJS[int](t, reader, `document.scripts.length`), "share pages carry no script")
	assert.Equal(t, "noindex, nofollow", evalJS[string](t, reader, `document.querySelector('meta[name=robots]').content`))
	assert.Zero(t, evalJS[int](t, reader, `document.querySelectorAll('button.src-preview').length`), "no excerpt buttons for anonymous readers")
	assert.NotContains(t, evalJS[string](t, reader, `document.body.innerText`), "browser", "no user data beyond the conversation")
	// Without JavaScript the superscript is a plain anchor jump and :target highlights the entry.
	reader.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(".msg.assistant sup.cite-ref a")))
	waitJS(t, reader, 5*time.Second, `location.hash === `+jsString(shared.Sups[0].Href), "anchor jump")
	assert.Equal(t, strings.TrimPrefix(shared.Sups[0].Href, "#"), evalJS[string](t, reader, `document.querySelector(':target').id`))
	screenshot(t, reader, "share-no-js")

	// A revoked share is the same 404 page as an unknown one.
	token := shareURL[strings.LastIndex(shareURL, "/")+1:]
	require.Equal(t, http.StatusNoContent, stack.api(t, http.MethodDelete, "/api/shares/"+token, nil))
	for _, u := range []string{shareURL, stack.URL + "/s/unknown-token"} {
		ctx, cancel := context.WithTimeout(reader.ctx, 10*time.Second)
		res, err := chromedp.Run(ctx, chromedp.NavigateResponse(u))
		cancel()
		require.NoError(t, err)
		assert.EqualValues(t, http.StatusNotFound, res.Status, u)
		assert.Contains(t, evalJS[string](t, reader, `document.body.innerText`), "已被撤销")
	}
	screenshot(t, reader, "share-revoked")
	assert.Empty(t, tb.Dialogs())
	t.Logf("browser flow took %s", time.Since(start).Round(time.Millisecond))
}

// TestBrowserXSSInert stores hostile content the way a compromised model or tool could produce it
// and checks that neither the desktop view nor the share page runs any of it.
func TestBrowserXSSInert(t *testing.T) {
	requireBrowser(t) // skip before building the stack when there is no browser
	stack := newBrowserStack(t, nil)
	ctx := context.Background()
	sess, err := stack.Store.CreateSession(ctx, store.Session{UserID: stack.User.ID, Channel: "desktop", Title: `<img src=x onerror=window.__xss=3>`})
	require.NoError(t, err)
	_, err = stack.Store.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: `<script>window.__xss=4</script> hi`})
	require.NoError(t, err)
	meta, err := json.Marshal(map[string]any{"citations": []map[string]any{
		{"n": 1, "url": "https://example.com/a", "title": `<img src=x onerror=window.__xss=1>`},
		{"n": 2, "url": "javascript:window.__xss=5", "title": "js"},
	}})
	require.NoError(t, err)
	answer, err := stack.Store.AppendMessage(ctx, store.Message{
		SessionID: sess.ID, Role: store.RoleAssistant, Metadata: meta,
		Content: "Answer[^1^][^2^] <img src=x onerror=window.__xss=2> <script>alert(1)</script>\n\n" +
			"[click](javascript:window.__xss=6) <svg onload=alert(2)>",
	})
	require.NoError(t, err)
	var share struct {
		URL string `json:"url"`
	}
	require.Equal(t, http.StatusCreated, stack.api(t, http.MethodPost, "/api/sessions/"+sess.ID+"/shares", &share))

	browser := newBrowser(t)
	tb := newTab(t, browser, false)
	tb.do(t, 15*time.Second,
		chromedp.Navigate(stack.loginLink(t)), // a one-time login link logs in and moves on to /
		chromedp.WaitVisible(chromedp.CSS("#input")),
		chromedp.Navigate(stack.URL+"/#s="+sess.ID),
	)
	sel := fmt.Sprintf("#msg-%d", answer.ID)
	waitJS(t, tb, 15*time.Second, `!!document.querySelector(`+jsString(sel+" details.sources")+`)`, "stored answer renders")
	a := readAnswer(t, tb, sel)
	require.Len(t, a.Sources, 1, "the javascript: citation is dropped")
	assert.Equal(t, `<img src=x onerror=window.__xss=1>`, a.Sources[0].Title, "a hostile title is shown as text")
	require.Len(t, a.Sups, 1)
	assert.Contains(t, a.Text, "<img src=x onerror=window.__xss=2>", "raw HTML in the answer is shown as text")
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('#sessions').innerText`), "<img src=x")
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('#messages .msg.user').innerText`), "<script>")
	// The answer toolbar's own icons are SVG drawn by actions.js; anything else is injected markup.
	assert.Zero(t, evalJS[int](t, tb, `[...document.querySelectorAll('#messages img, #messages script, #messages svg, #sessions img')].filter(e => !e.closest('.msg-actions')).length`))
	assert.Zero(t, evalJS[int](t, tb, `document.querySelectorAll('#messages a[href^="javascript:" i]').length`))
	time.Sleep(300 * time.Millisecond) // give any injected handler the chance to fire
	assert.Equal(t, "undefined", evalJS[string](t, tb, `typeof window.__xss`))
	screenshot(t, tb, "xss-desktop")

	// The share page, with JavaScript enabled so an injected script would run.
	tb.do(t, 15*time.Second, chromedp.Navigate(share.URL), chromedp.WaitVisible(chromedp.CSS("details.sources")))
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, "undefined", evalJS[string](t, tb, `typeof window.__xss`))
	assert.Zero(t, evalJS[int](t, tb, `document.querySelectorAll('main img, main script, main svg').length`))
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('li.source a').textContent`), "<img")
	screenshot(t, tb, "xss-share")
	assert.Empty(t, tb.Dialogs(), "no alert ran")
}

// TestBrowserCancelAndFailure: while a run streams, the text arrives as text (markers held back by
// the server, markup not interpreted), the stop button cancels it and the bubble says so; a failed
// run says that it failed and why.
func TestBrowserCancelAndFailure(t *testing.T) {
	requireBrowser(t) // skip before building the stack when there is no browser
	stack := newBrowserStack(t, slowModel{})
	browser := newBrowser(t)
	tb := newTab(t, browser, false)
	tb.do(t, 15*time.Second,
		chromedp.Navigate(stack.loginLink(t)),
		chromedp.WaitVisible(chromedp.CSS("#input")),
	)
	waitJS(t, tb, 10*time.Second, `document.getElementById('conn').textContent === '已连接'`, "websocket connects")

	tb.do(t, 10*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "stream please"), chromedp.Click(chromedp.CSS("#send")))
	waitJS(t, tb, 10*time.Second, `(document.querySelector('#messages .streaming') || {textContent: ''}).textContent.includes('part 4')`, "deltas stream in")
	assert.False(t, evalJS[bool](t, tb, `document.getElementById('cancel').hidden`), "stop button shows while running")
	assert.True(t, evalJS[bool](t, tb, `document.getElementById('send').disabled`))
	streamed := evalJS[string](t, tb, `document.querySelector('#messages .streaming').textContent`)
	assert.Contains(t, streamed, "<b>", "model markup is shown as text")
	assert.NotContains(t, streamed, "[^", "no marker, not even half of one, is shown while streaming")
	assert.Zero(t, evalJS[int](t, tb, `document.querySelectorAll('#messages b').length`))
	screenshot(t, tb, "run-streaming")

	tb.do(t, 5*time.Second, chromedp.Click(chromedp.CSS("#cancel")))
	waitJS(t, tb, 10*time.Second, `!!document.querySelector('#messages .msg.assistant .status.cancelled')`, "cancelled run is marked")
	assert.Equal(t, "已停止", evalJS[string](t, tb, `document.querySelector('#messages .status.cancelled').textContent`))
	assert.True(t, evalJS[bool](t, tb, `document.getElementById('cancel').hidden`))
	assert.False(t, evalJS[bool](t, tb, `document.getElementById('send').disabled`))

	tb.do(t, 10*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "please fail"), chromedp.Click(chromedp.CSS("#send")))
	waitJS(t, tb, 10*time.Second, `!!document.querySelector('#messages .msg.assistant:last-child .status.failed')`, "failed run is marked")
	failed := evalJS[string](t, tb, `document.querySelector('#messages .msg.assistant:last-child .status.failed').textContent`)
	assert.Contains(t, failed, "回答失败")
	// The user reads a plain sentence; the provider's own error goes to the log only.
	assert.Contains(t, failed, "模型服务暂时不可用")
	assert.NotContains(t, failed, "upstream model unavailable")
	screenshot(t, tb, "run-cancelled-failed")

	// New chat empties the view; picking the session in the sidebar brings its stored history back.
	tb.do(t, 5*time.Second, chromedp.Click(chromedp.CSS("#new-chat")))
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('#messages .empty').textContent`), "问一个问题")
	assert.True(t, evalJS[bool](t, tb, `document.getElementById('share-btn').disabled`))
	tb.do(t, 5*time.Second, chromedp.Click(chromedp.CSS("#sessions a")))
	waitJS(t, tb, 10*time.Second, `document.querySelectorAll('#messages .msg.user').length === 2`, "history reloads")
	assert.Equal(t, "stream please", evalJS[string](t, tb, `document.getElementById('chat-title').textContent`))
	assert.False(t, evalJS[bool](t, tb, `document.getElementById('share-btn').disabled`))
}

// TestBrowserSecondTabFollowsRun: a second tab of the same user sees the new session appear, and
// while it shows that session it follows a run started in the first tab, ending with exactly one
// rendered copy of each answer.
func TestBrowserSecondTabFollowsRun(t *testing.T) {
	requireBrowser(t) // skip before building the stack when there is no browser
	stack := newBrowserStack(t, nil)
	browser := newBrowser(t)
	a, b := newTab(t, browser, false), newTab(t, browser, false)
	for _, tb := range []*tab{a, b} {
		tb.do(t, 15*time.Second, chromedp.Navigate(stack.loginLink(t)), chromedp.WaitVisible(chromedp.CSS("#input")))
		waitJS(t, tb, 10*time.Second, `document.getElementById('conn').textContent === '已连接'`, "websocket connects")
	}
	answered := func(n int) string {
		return fmt.Sprintf(`document.querySelectorAll('#messages .msg.assistant details.sources').length === %d && document.getElementById('cancel').hidden`, n)
	}

	a.do(t, 10*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "电子发票抬头写错了怎么办？"), chromedp.Click(chromedp.CSS("#send")))
	waitJS(t, a, 60*time.Second, answered(1), "first answer in tab A")
	waitJS(t, b, 10*time.Second, `document.querySelectorAll('#sessions a').length === 1`, "tab B lists the new session")
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS("#sessions a")))
	waitJS(t, b, 10*time.Second, answered(1), "tab B shows the stored answer")

	a.do(t, 10*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "红字发票怎么开？"), chromedp.Click(chromedp.CSS("#send")))
	waitJS(t, a, 60*time.Second, answered(2), "second answer in tab A")
	waitJS(t, b, 20*time.Second, answered(2), "tab B followed the run")
	assert.Equal(t, 2, evalJS[int](t, b, `document.querySelectorAll('#messages .msg.user').length`))
	assert.Equal(t, 2, evalJS[int](t, b, `document.querySelectorAll('#messages .msg.assistant').length`), "no duplicate answer")
	assert.Equal(t,
		evalJS[string](t, a, `document.querySelector('#messages .msg.assistant:last-child .bubble').innerHTML.replace(/<div class="activity">.*?<\/div><\/div>/s, '')`),
		evalJS[string](t, b, `document.querySelector('#messages .msg.assistant:last-child .bubble').innerHTML.replace(/<div class="activity">.*?<\/div><\/div>/s, '')`),
		"both tabs render the same answer")
	for _, tb := range []*tab{a, b} {
		assert.True(t, evalJS[bool](t, tb, `(m => m.scrollTop + m.clientHeight >= m.scrollHeight - 2)(document.getElementById('messages'))`),
			"the view follows the answer to its end")
	}
	screenshot(t, b, "second-tab")
}

// TestBrowserHistoryPageBeforeFinalAnswer: a history page that already holds a run's stored answer
// can reach the page before that run's answer.final (the page is not held back with the run's
// joined deltas; TestBrowserSecondTabFollowsRun showed two copies of an answer under load). The
// frames are replayed in that order through the page's own dispatcher: one article for the answer,
// the page's, with the final HTML.
func TestBrowserHistoryPageBeforeFinalAnswer(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	sid := seedChat(t, stack, "年假有几天", 2)
	tb := loginTab(t, stack, newBrowser(t))
	tb.do(t, 30*time.Second, chromedp.Navigate(stack.URL+"/#s="+sid))
	waitJS(t, tb, 30*time.Second, `citegate.state.current === `+jsString(sid)+` && document.querySelectorAll('#messages .msg.assistant').length > 0`, "the chat is open")
	got := evalJS[map[string]any](t, tb, `(() => {
		const cg = citegate, sid = cg.state.current;
		cg.appendUser('第二个问题'); // this tab's own send: run.started asks for no page
		cg.emit('frame:run.started', {type: 'run.started', sessionId: sid, runId: 'run-x'});
		cg.emit('frame:answer.html', {type: 'answer.html', sessionId: sid, runId: 'run-x', html: '<p>正在回答</p>'});
		cg.emit('frame:session.history', {type: 'session.history', sessionId: sid, messages: [
			{id: 9001, role: 'USER', html: '<p class="plain">第二个问题</p>'},
			{id: 9002, role: 'ASSISTANT', html: '<p>已存的回答</p>'},
		]});
		cg.emit('frame:answer.final', {type: 'answer.final', sessionId: sid, runId: 'run-x', messageId: 9002, html: '<p>最终回答</p>'});
		cg.emit('frame:run.finished', {type: 'run.finished', sessionId: sid, runId: 'run-x', phase: 'COMPLETED'});
		const answers = [...document.querySelectorAll('#messages .msg.assistant')];
		return {n: answers.length, id: answers.length ? answers[answers.length - 1].dataset.id : '', text: answers.map((a) => a.textContent).join(' | ')};
	})()`)
	assert.Equal(t, float64(1), got["n"], "one article for the answer: %v", got["text"])
	assert.Equal(t, "9002", got["id"])
	assert.Contains(t, got["text"], "最终回答")
	assert.NotContains(t, got["text"], "正在回答")
}

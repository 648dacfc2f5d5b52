package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

// TestBrowserLoadEarlier: a chat of 120 messages opens with its newest 50 and a "load earlier"
// button; pressing it inserts the previous 50 above without moving the message in view, and
// scrolling to the top loads the rest, after which the button is gone and every message is shown
// once, in order.
func TestBrowserLoadEarlier(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	id := seedChat(t, stack, "很长的对话", 120)
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.do(t, 30*time.Second, chromedp.Navigate(stack.URL+"/#s="+id))
	waitConnected(t, tb)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 50`, "the newest page renders")
	waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .load-earlier')`, "a load-earlier button above it")
	shot(t, tb, "load-earlier")

	// Remember which message is at the top of the view, press the button, and check it stayed put.
	evalJS[bool](t, tb, `(() => {
		const m = document.getElementById('messages');
		const first = m.querySelector('.msg[data-id]');
		window.__anchor = first.dataset.id;
		m.scrollTop = first.offsetTop - m.offsetTop + 5;
		window.__anchorTop = first.getBoundingClientRect().top;
		return true;
	})()`)
	// Clicked from script: chromedp's Click would first scroll the button into view.
	evalJS[bool](t, tb, `(document.querySelector('#messages .load-earlier').click(), true)`)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 100`, "the earlier page is inserted")
	moved := evalJS[float64](t, tb, `Math.abs(document.getElementById('msg-' + window.__anchor).getBoundingClientRect().top - window.__anchorTop)`)
	if moved > 2 {
		t.Errorf("the message in view moved by %.0f px when the earlier page was inserted", moved)
	}

	// Scrolling to the top asks for the last page by itself.
	evalJS[bool](t, tb, `(document.getElementById('messages').scrollTop = 0, true)`)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 120`, "scrolling to the top loads the rest")
	waitJS(t, tb, 30*time.Second, `!document.querySelector('#messages .load-earlier')`, "no button once everything is shown")
	ordered := evalJS[bool](t, tb, `(() => {
		const ids = [...document.querySelectorAll('#messages .msg')].map((a) => Number(a.dataset.id));
		return ids.every((v, i) => i === 0 || v > ids[i - 1]) && new Set(ids).size === ids.length;
	})()`)
	if !ordered {
		t.Error("messages are not each shown once in ascending order")
	}
	// The inserted pages are rendered like the first one (sanitised HTML with superscripts).
	sups := evalJS[int](t, tb, `document.querySelectorAll('#messages .msg:first-of-type .cite-ref, #messages .msg.assistant .cite-ref').length`)
	if sups == 0 {
		t.Error("earlier answers show no citation superscripts")
	}
}

// TestBrowserReconnectAndRateLimitPhoneDark is TestBrowserReconnectAndRateLimit at 375 px in dark
// mode: the connection line with its countdown and "retry now" fits the phone's header, the button
// is reached with Tab and Enter reconnects at once, the window regaining focus does too; a send
// refused by the rate limit says when to retry and keeps the typed text. The accessibility audit
// runs on the disconnected header and on the notice.
func TestBrowserReconnectAndRateLimitPhoneDark(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil, func(c *gateway.Config) { c.ChatRatePerMinute = 1 })
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.setLayout(t, phoneDark)

	// The next automatic attempt is ten minutes away, so only the button can bring the page back.
	drop := `(citegate.state.backoff = 600000, citegate.state.ws.close(), true)`
	evalJS[bool](t, tb, drop)
	waitJS(t, tb, 15*time.Second, `!document.getElementById('conn-retry').hidden && /\d+ 秒后重连/.test(document.getElementById('conn').textContent)`, "countdown and retry-now show")
	box := evalJS[map[string]float64](t, tb, `(() => { const r = document.getElementById('conn-retry').getBoundingClientRect(); const c = document.getElementById('conn').getBoundingClientRect();
		return {l: Math.min(r.left, c.left), r: Math.max(r.right, c.right), h: r.height, w: r.width, sw: document.documentElement.scrollWidth}; })()`)
	assert.GreaterOrEqual(t, box["l"], 0.0, "the connection line starts on screen: %v", box)
	assert.LessOrEqual(t, box["r"], 375.0, "the connection line ends on screen: %v", box)
	assert.GreaterOrEqual(t, box["h"], 24.0, "retry-now is at least 24 px tall: %v", box)
	assert.LessOrEqual(t, box["sw"], 375.0, "no horizontal scroll: %v", box)
	auditA11y(t, tb, "disconnected phone-dark")
	tabUntil(t, tb, "#conn-retry", 40)
	require.True(t, evalJS[bool](t, tb, `document.activeElement.matches(':focus-visible')`), "retry-now shows its focus")
	tb.do(t, 15*time.Second, chromedp.KeyEvent("\r"))
	waitConnected(t, tb)
	assert.True(t, evalJS[bool](t, tb, `document.getElementById('conn-retry').hidden`))
	evalJS[bool](t, tb, drop)
	waitJS(t, tb, 15*time.Second, `!document.getElementById('conn-retry').hidden`, "retry-now shows again")
	evalJS[bool](t, tb, `(window.dispatchEvent(new Event('focus')), true)`)
	waitConnected(t, tb)

	// Spend the budget (burst 5) from this page's connection, then send from the composer.
	evalJS[bool](t, tb, `(() => { for (let i = 0; i < 5; i++) citegate.send({type: 'chat.send', text: '问题 ' + i}); return true; })()`)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#sessions a').length === 5`, "five chats start")
	const typed = "第六个问题：年假有几天？"
	// On the phone "new chat" is in the drawer; the composer's own new-chat path is the same.
	evalJS[bool](t, tb, `(document.getElementById('new-chat').click(), true)`)
	tb.do(t, 15*time.Second, chromedp.SetValue(chromedp.CSS("#input"), typed), chromedp.Click(chromedp.CSS("#send")))
	waitJS(t, tb, 15*time.Second, `!document.getElementById('composer-notice').hidden`, "rate-limit notice shows")
	assert.Regexp(t, `\d+ 秒后可以再发送`, evalJS[string](t, tb, `document.getElementById('composer-notice').textContent`))
	assert.Equal(t, typed, evalJS[string](t, tb, `document.getElementById('input').value`), "the typed text is kept")
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('#messages .msg.rejected .status').textContent`), "秒后再试")
	notice := evalJS[map[string]float64](t, tb, `(() => { const r = document.getElementById('composer-notice').getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom, h: innerHeight, sw: document.documentElement.scrollWidth}; })()`)
	assert.True(t, notice["l"] >= 0 && notice["r"] <= 375 && notice["t"] >= 0 && notice["b"] <= notice["h"], "the notice is on screen: %v", notice)
	assert.LessOrEqual(t, notice["sw"], 375.0, "no horizontal scroll")
	auditA11y(t, tb, "rate limited phone-dark")
}

// TestBrowserFavicons: every page — the login page, the app shell, a share page, the operator
// console and the not-found page — links an icon; under the page's own Content-Security-Policy the
// icon loads as an image, and fetched from the page it answers 200 with an image content type.
func TestBrowserFavicons(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	sid := seedChat(t, stack, "年假有几天", 2)
	var sh sharedLink
	require.Equal(t, http.StatusCreated, stack.api(t, http.MethodPost, "/api/sessions/"+sid+"/shares", &sh))
	_, _, err := stack.Store.SetOperator(context.Background(), "browser", true, store.Actor{Name: "cli:test"})
	require.NoError(t, err)
	browser := newBrowser(t)
	anon := newTab(t, browser, false)
	tb := loginTab(t, stack, browser)
	for _, p := range []struct {
		name, url, ready string
		tb               *tab
	}{
		{"login page", stack.URL + "/", "#token", anon},
		{"app shell", stack.URL + "/", "#input", tb},
		{"share page", sh.URL, ".msg.assistant", anon},
		{"operator console", stack.URL + "/operator", "tr[data-share]", tb},
		{"not-found page", stack.URL + "/s/no-such-link", "body", anon},
	} {
		t.Run(strings.ReplaceAll(p.name, " ", "-"), func(t *testing.T) {
			p.tb.do(t, 30*time.Second, chromedp.Navigate(p.url), chromedp.WaitReady(chromedp.CSS(p.ready)))
			href := evalJS[string](t, p.tb, `(document.querySelector('link[rel~="icon"]') || {}).href || ''`)
			require.NotEmpty(t, href, "%s links no icon", p.name)
			// As the browser shows it: an image load, which the page's img-src must allow.
			ctx, cancel := context.WithTimeout(p.tb.ctx, 15*time.Second)
			loaded, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => {
				const img = new Image(); img.src = document.querySelector('link[rel~="icon"]').href;
				try { await img.decode(); return ''; } catch (e) { return String(e); }
			})()`, chromedp.EvalAwaitPromise))
			cancel()
			require.NoError(t, err)
			assert.Empty(t, loaded, "%s: the icon %s does not load as an image under the page's policy", p.name, href)
			// The response: fetched from the page (most pages forbid fetch, so bypass their policy).
			p.tb.do(t, 30*time.Second,
				bypassCSP(true),
				chromedp.Reload(),
				chromedp.WaitReady(chromedp.CSS(p.ready)),
			)
			t.Cleanup(func() { p.tb.do(t, 15*time.Second, bypassCSP(false)) })
			ctx, cancel = context.WithTimeout(p.tb.ctx, 15*time.Second)
			res, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`(async () => {
				const r = await fetch(document.querySelector('link[rel~="icon"]').href);
				const body = await r.arrayBuffer();
				return {status: r.status, type: r.headers.get('content-type') || '', size: body.byteLength};
			})()`, chromedp.EvalAwaitPromise))
			cancel()
			require.NoError(t, err)
			assert.EqualValues(t, http.StatusOK, res["status"], "%s: GET %s", p.name, href)
			assert.True(t, strings.HasPrefix(res["type"].(string), "image/"), "%s: %s is served as %v, not an image", p.name, href, res["type"])
			assert.Greater(t, res["size"], 0.0, "%s: the icon is empty", p.name)
		})
	}
}

// bypassCSP turns the tab's Content-Security-Policy enforcement off or on (from the next load).
func bypassCSP(on bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: on})
		return err
	})
}

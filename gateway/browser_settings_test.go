package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// TestBrowserLanguageSwitch: the language switcher in the account box (the sidebar at 1280 px, the
// drawer at 375 px), light and dark. Chosen with the keyboard it reloads the page in English, keeping
// the open chat, the draft and the focus; a reload stays English; a second browser signed in as the
// same user (whose Accept-Language says Chinese) is English too; and a tab already open elsewhere
// follows a later switch by itself. The accessibility audit passes in both languages.
func TestBrowserLanguageSwitch(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	chat := seedChat(t, stack, "年假有几天", 2)
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	openChat := func(t *testing.T, tb *tab) {
		t.Helper()
		waitJS(t, tb, 15*time.Second, `!!document.querySelector('#sessions a[data-id="`+chat+`"]')`, "chat list loads")
		tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS(`#sessions a[data-id="`+chat+`"]`)))
		waitJS(t, tb, 15*time.Second, `document.querySelectorAll('#messages .msg').length === 2`, "chat opens")
	}
	openChat(t, tb)
	// Loaded is a page that is up again after a reload: a marker set before it is gone, the page
	// speaks lang, the websocket is connected and the chat is shown.
	loaded := func(t *testing.T, tb *tab, lang string) {
		t.Helper()
		waitAcrossReload(t, tb, 30*time.Second, `!window.__before && document.readyState === 'complete' && document.documentElement.dataset.lang === '`+lang+`'`, "page reloads in "+lang)
		waitConnected(t, tb)
		waitJS(t, tb, 15*time.Second, `document.querySelectorAll('#messages .msg').length === 2 && !!document.querySelector('#messages details.sources summary')`, "the chat is shown again")
	}
	// englishEverywhere checks the strings the shell, the scripts and the server-rendered answer show.
	englishEverywhere := func(t *testing.T, tb *tab) {
		t.Helper()
		assert.Equal(t, "en", evalJS[string](t, tb, `document.documentElement.lang`))
		assert.Contains(t, evalJS[string](t, tb, `document.getElementById('new-chat').textContent`), "New chat")
		assert.Equal(t, "Send", evalJS[string](t, tb, `document.getElementById('send').textContent`))
		assert.Contains(t, evalJS[string](t, tb, `document.getElementById('input').placeholder`), "Ask a question")
		assert.Equal(t, "Connected", evalJS[string](t, tb, `document.getElementById('conn').textContent`))
		assert.Regexp(t, `^Sources 2`, evalJS[string](t, tb, `document.querySelector('#messages details.sources summary').textContent`))
		assert.Equal(t, "en", evalJS[string](t, tb, `document.querySelector('.lang-opt[aria-pressed="true"]').dataset.choice`))
	}
	const drawerShown = `getComputedStyle(document.getElementById('sidebar')).visibility === 'visible' && document.getElementById('sidebar').getBoundingClientRect().left >= 0`
	const drawerHidden = `getComputedStyle(document.getElementById('sidebar')).visibility === 'hidden'`

	eachLayout(t, tb, func(t *testing.T, l layout) {
		// Every layout starts in Chinese with no choice made (the browser says Chinese).
		_, err := stack.Store.SetLanguage(context.Background(), stack.User.ID, "")
		require.NoError(t, err)
		evalJS[bool](t, tb, `(window.__before = true, true)`)
		tb.do(t, 30*time.Second, chromedp.Reload())
		loaded(t, tb, "zh")
		assert.Equal(t, "", evalJS[string](t, tb, `document.querySelector('.lang-opt[aria-pressed="true"]').dataset.choice`), "follow the browser is pressed")
		if l.Mobile {
			waitJS(t, tb, 15*time.Second, drawerHidden, "drawer starts closed")
			tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#menu-btn")))
			waitJS(t, tb, 15*time.Second, drawerShown, "drawer opens")
		}
		require.True(t, evalJS[bool](t, tb, `Array.from(document.querySelectorAll('.lang-opt')).every((b) => b.getBoundingClientRect().width > 0 && b.getBoundingClientRect().height >= 24)`),
			"the switcher shows, each button at least 24 px tall")
		assert.Equal(t, "语言 · Language", evalJS[string](t, tb, `(() => { const g = document.querySelector('.me-lang'); return document.getElementById(g.getAttribute('aria-labelledby')).textContent; })()`),
			"the group is named in both languages")
		auditA11y(t, tb, "switcher zh "+l.Name)

		// Keyboard: Tab reaches the switcher with a visible focus (inside the drawer on a phone),
		// and Enter on English switches.
		var stops []focusStop
		if l.Mobile {
			// The drawer keeps focus inside it; walk it from its first control.
			for range 20 {
				tb.do(t, 15*time.Second, chromedp.KeyEvent("\t"))
				if evalJS[bool](t, tb, `document.activeElement.matches('.lang-opt[data-choice="en"]')`) {
					break
				}
			}
			require.True(t, evalJS[bool](t, tb, `document.activeElement.matches('.lang-opt[data-choice="en"]') && document.activeElement.matches(':focus-visible')`),
				"Tab reaches English inside the drawer, focus visible")
		} else {
			stops = tabThrough(t, tb, 60)
			requireReachable(t, stops, "button.lang-opt", "#new-chat", "#input")
			evalJS[bool](t, tb, `(document.querySelector('.lang-opt[data-choice="en"]').focus(), true)`)
		}
		evalJS[bool](t, tb, `(document.getElementById('input').value = '草稿 draft', window.__before = true, true)`)
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\r"))
		loaded(t, tb, "en")
		englishEverywhere(t, tb)
		assert.Equal(t, "草稿 draft", evalJS[string](t, tb, `document.getElementById('input').value`), "the draft survives the switch")
		assert.Equal(t, chat, evalJS[string](t, tb, `new URLSearchParams(location.search).get('s')`), "the open chat stays open (its address, ?s=)")
		waitJS(t, tb, 15*time.Second, `document.activeElement.matches('.lang-opt[data-choice="en"]')`, "focus returns to the switcher")
		if l.Mobile {
			waitJS(t, tb, 15*time.Second, drawerShown, "on a phone the drawer is open again around it")
		}
		u, err := stack.Store.GetUser(context.Background(), stack.User.ID)
		require.NoError(t, err)
		assert.Equal(t, store.LangEN, u.Language, "the choice is stored on the server")
		auditA11y(t, tb, "switcher en "+l.Name)
		switch l.Name {
		case "desktop-light":
			shot(t, tb, "language-desktop-en")
		case "phone-dark":
			shot(t, tb, "language-phone-drawer-en-dark")
		}
		if l.Mobile {
			tb.do(t, 15*time.Second, chromedp.KeyEvent(kb.Escape))
			waitJS(t, tb, 15*time.Second, drawerHidden, "Esc closes the drawer")
		}

		// A plain reload stays English.
		evalJS[bool](t, tb, `(window.__before = true, true)`)
		tb.do(t, 30*time.Second, chromedp.Reload())
		loaded(t, tb, "en")
		englishEverywhere(t, tb)
		evalJS[bool](t, tb, `(document.getElementById('input').value = '', true)`)
	})

	// Another browser (own cookies, Accept-Language zh-CN) signed in as the same user: English.
	other := loginTab(t, stack, browser)
	openChat(t, other)
	englishEverywhere(t, other)
	auditA11y(t, other, "second browser, English")

	// The first tab switches back to Chinese with the mouse; the other, idle, follows at once.
	evalJS[bool](t, other, `(window.__before = true, true)`)
	evalJS[bool](t, tb, `(window.__before = true, true)`)
	tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS(`.lang-opt[data-choice="zh"]`)))
	loaded(t, tb, "zh")
	loaded(t, other, "zh")
	for _, p := range []*tab{tb, other} {
		assert.Equal(t, "zh-CN", evalJS[string](t, p, `document.documentElement.lang`))
		assert.Contains(t, evalJS[string](t, p, `document.getElementById('new-chat').textContent`), "新对话")
		assert.Regexp(t, `^来源 2`, evalJS[string](t, p, `document.querySelector('#messages details.sources summary').textContent`))
		assert.Equal(t, "zh", evalJS[string](t, p, `document.querySelector('.lang-opt[aria-pressed="true"]').dataset.choice`))
	}

	// English again, then sign out: the sign-in page that follows speaks English too, although the
	// browser still asks for Chinese.
	evalJS[bool](t, tb, `(window.__before = true, true)`)
	tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS(`.lang-opt[data-choice="en"]`)))
	loaded(t, tb, "en")
	evalJS[bool](t, tb, `(document.querySelector('form[action="/logout"]').requestSubmit(), true)`)
	waitAcrossReload(t, tb, 30*time.Second, `!!document.querySelector('input[name="token"]') && document.documentElement.lang === 'en'`, "the sign-in page after sign-out is in English")
	auditA11y(t, tb, "sign-in page after sign-out, English")
}

// waitAcrossReload polls a JavaScript predicate while the page may be navigating: an evaluation
// that fails because the document went away is retried, like a false answer. The timeout only
// bounds a hang.
func waitAcrossReload(t *testing.T, tb *tab, timeout time.Duration, expr, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s: %s (last error: %v)", msg, timeout, expr, last)
}

package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sourceCard is what the open source card shows, beside what the sources list says of the
// entry the superscript points at.
type sourceCard struct {
	Hidden    bool   `json:"hidden"`
	Title     string `json:"title"`
	Site      string `json:"site"`
	Time      string `json:"time"`
	Lead      string `json:"lead"`
	Described string `json:"described"`
	InView    bool   `json:"inView"`
	// the entry of the sources list
	EntryTitle string `json:"entryTitle"`
	EntrySite  string `json:"entrySite"`
	EntryLead  string `json:"entryLead"`
	EntryTime  string `json:"entryTime"`
}

const readCardJS = `(() => {
	const c = document.getElementById('src-card'), r = c.getBoundingClientRect();
	const ref = document.activeElement && document.activeElement.matches('sup.cite-ref a') ? document.activeElement : null;
	const q = (s) => (c.querySelector(s) || {}).textContent || '';
	const link = ref || [...document.querySelectorAll('#messages sup.cite-ref a')].find((a) => a.getAttribute('aria-describedby') === 'src-card');
	const entry = link ? document.getElementById(decodeURIComponent(link.getAttribute('href').slice(1))) : null;
	const e = (s) => entry && entry.querySelector(s) ? entry.querySelector(s).textContent : '';
	return {hidden: c.hidden, title: q('.src-card-title'), site: q('.src-domain'), time: q('.src-card-time'), lead: q('.src-card-lead'),
		described: link ? link.getAttribute('aria-describedby') || '' : '',
		inView: r.left >= 0 && r.right <= innerWidth + 1 && r.top >= 0 && r.bottom <= innerHeight + 1,
		entryTitle: entry ? entry.querySelector(':scope > a').textContent : '', entrySite: e('.src-domain'), entryLead: e('.src-lead'),
		entryTime: entry && entry.querySelector('.src-time') ? entry.querySelector('.src-time').getAttribute('datetime') : ''};
})()`

func readCard(t *testing.T, tb *tab) sourceCard {
	t.Helper()
	var c sourceCard
	require.NoError(t, json.Unmarshal(evalJS[[]byte](t, tb, readCardJS), &c))
	return c
}

// assertCard checks that the open card describes the entry: its title, site, retrieval time and
// first lines of the excerpt, on screen.
func assertCard(t *testing.T, c sourceCard, what string) {
	t.Helper()
	assert.False(t, c.Hidden, "%s: the card is open", what)
	assert.NotEmpty(t, c.Title, "%s: title", what)
	assert.Equal(t, c.EntryTitle, c.Title, "%s: the card names the entry's page", what)
	assert.NotEmpty(t, c.Site, "%s: site", what)
	assert.Equal(t, c.EntrySite, c.Site, what)
	assert.NotEmpty(t, c.EntryTime, "%s: the run recorded when it retrieved the page", what)
	assert.Contains(t, c.Time, c.EntryTime[:4], "%s: retrieval time shown", what)
	assert.NotEmpty(t, c.Lead, "%s: lead", what)
	assert.Equal(t, strings.TrimSpace(c.EntryLead), strings.TrimSpace(c.Lead), what)
	assert.True(t, c.InView, "%s: the card fits the screen", what)
}

// TestBrowserSourcesPhone: on a 375 px phone in dark mode a live run's tool lines are the same
// after the chat is reopened; then, at 375 px dark and 1280 px light, Tab from the composer
// reaches a citation superscript (focus ring drawn), the source card opens with the source's
// title, site, retrieval time and lead, and Escape closes it; a tap with touch emulation opens
// the card instead of jumping to the sources list, a second tap closes it, and Enter on the
// superscript still jumps.
func TestBrowserSourcesPhone(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.setLayout(t, phoneDark)

	t.Run("tool lines after reopen", func(t *testing.T) {
		tb.do(t, 15*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "年假有几天"), chromedp.Click(chromedp.CSS("#send")))
		waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .msg.assistant .activity .tool.ok') && !!document.querySelector('#messages .msg.assistant sup.cite-ref')`, "live run shows its tool line and answer")
		waitJS(t, tb, 30*time.Second, `!!citegate.state.current && new URLSearchParams(location.search).get('s') === citegate.state.current && !citegate.state.runs.size`, "run finished")
		live := evalJS[[]string](t, tb, `[...document.querySelectorAll('#messages .activity .tool')].map((e) => e.textContent)`)
		require.NotEmpty(t, live)
		fits := evalJS[bool](t, tb, `[...document.querySelectorAll('#messages .activity .tool')].every((e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth + 1; })`)
		assert.True(t, fits, "the tool lines fit the phone")
		tb.do(t, 15*time.Second, chromedp.Reload())
		waitConnected(t, tb)
		waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 2 && !!document.querySelector('#messages sup.cite-ref a')`, "history renders")
		reopened := evalJS[[]string](t, tb, `[...document.querySelectorAll('#messages .activity .tool')].map((e) => e.textContent)`)
		assert.Equal(t, live, reopened, "the same tool lines after reopening")
		assert.Contains(t, fmt.Sprint(reopened), "已搜索")
		auditA11y(t, tb, "reopened chat with tool lines phone-dark")
	})

	for _, l := range []layout{phoneDark, desktopLight} {
		t.Run("keyboard "+l.Name, func(t *testing.T) {
			tb.setLayout(t, l)
			evalJS[bool](t, tb, `(document.getElementById('input').focus(), true)`)
			// Back from the composer over the answer's actions and sources to its last superscript.
			tabTo(t, tb, `#messages sup.cite-ref a`, true, 40)
			waitJS(t, tb, 15*time.Second, `!document.getElementById('src-card').hidden`, "the card opens on keyboard focus")
			c := readCard(t, tb)
			assertCard(t, c, l.Name)
			assert.Equal(t, "src-card", c.Described, "the superscript is described by the card")
			screenshot(t, tb, "source-card-keyboard-"+l.Name)
			press(t, tb, kb.Escape)
			waitJS(t, tb, 15*time.Second, `document.getElementById('src-card').hidden && document.activeElement.matches('sup.cite-ref a') && !document.activeElement.hasAttribute('aria-describedby')`, "Escape closes the card, focus stays")
		})
	}

	t.Run("tap phone-dark", func(t *testing.T) {
		tb.setLayout(t, phoneDark)
		// Narrowing the window slides the sidebar out as a drawer (0.2 s); until then it covers the answer.
		waitJS(t, tb, 15*time.Second, `getComputedStyle(document.getElementById('sidebar')).visibility === 'hidden'`, "the drawer is closed")
		setTouch(t, tb, true)
		defer setTouch(t, tb, false)
		evalJS[bool](t, tb, `(document.activeElement && document.activeElement.blur(), history.replaceState(null, '', location.pathname + location.search), true)`)
		waitJS(t, tb, 15*time.Second, `document.getElementById('src-card').hidden`, "no card before the tap")
		assert.Empty(t, smallTargets(t, tb, `#messages .src-preview`, touchTarget), "the excerpt buttons are touch-sized")
		// A superscript is inline in a sentence; its hit area still reaches past its box: a point
		// 10 px above and below its middle hits it, so the target is at least 24 px tall (WCAG 2.5.8).
		missed := evalJS[[]string](t, tb, `[...document.querySelectorAll('#messages sup.cite-ref a')].filter((a) => {
			const r = a.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
			if (y - 12 < 0 || y + 12 > innerHeight) return false; // off screen: elementFromPoint cannot see it
			return ![y - 10, y + 10].every((p) => { const e = document.elementFromPoint(x, p); return e && e.closest('sup.cite-ref a') === a; });
		}).map((a) => a.textContent + ' ' + Math.round(a.getBoundingClientRect().height) + 'px')`)
		assert.Empty(t, missed, "every superscript on screen has a hit area of at least 24 px")
		onScreen := evalJS[int](t, tb, `[...document.querySelectorAll('#messages sup.cite-ref a')].filter((a) => { const r = a.getBoundingClientRect(); return r.top - 12 >= 0 && r.bottom + 12 <= innerHeight; }).length`)
		assert.Positive(t, onScreen, "the hit areas were measured on superscripts in view")
		tap(t, tb, `#messages sup.cite-ref a`)
		waitJS(t, tb, 15*time.Second, `!document.getElementById('src-card').hidden`, "a tap opens the card")
		assertCard(t, readCard(t, tb), "tap")
		assert.Equal(t, "", evalJS[string](t, tb, `location.hash`), "a tap does not jump to the sources list")
		auditA11y(t, tb, "source card after a tap phone-dark")
		screenshot(t, tb, "source-card-tap-phone-dark")
		tap(t, tb, `#messages sup.cite-ref a`)
		waitJS(t, tb, 15*time.Second, `document.getElementById('src-card').hidden`, "a second tap closes the card")
		// After a tap, Enter on the superscript is a keyboard click: it jumps to the sources list.
		evalJS[bool](t, tb, `(() => {
			const a = document.querySelector('#messages sup.cite-ref a');
			const entry = document.getElementById(decodeURIComponent(a.getAttribute('href').slice(1)));
			window.__flashed = false;
			new MutationObserver(() => { if (entry.classList.contains('cite-flash')) window.__flashed = true; }).observe(entry, {attributes: true, attributeFilter: ['class']});
			a.focus();
			return true;
		})()`)
		press(t, tb, "\r")
		waitJS(t, tb, 15*time.Second, `window.__flashed === true`, "Enter jumps to the entry and flashes it")
	})
	tb.setLayout(t, desktopLight)
}

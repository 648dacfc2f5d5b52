package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBrowserMainScreens asks one question through the composer (the offline model answers with
// sources), then opens the three screens around an answer the README shows — the source card of a
// superscript, the excerpt panel of a source and the action bar under the answer — and saves each
// (docs/screenshots/ with CITEGATE_UPDATE_SCREENSHOTS=1), and the excerpt as the phone's bottom sheet in
// dark mode. In dark mode, at 1280 px and 375 px, the
// keyboard reaches the main controls and every focus ring is drawn in a colour that stands out
// from what is behind it (3:1, WCAG 1.4.11).
func TestBrowserMainScreens(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.do(t, 15*time.Second,
		chromedp.SetValue(chromedp.CSS("#input"), "年假有几天？"),
		chromedp.Click(chromedp.CSS("#send")),
	)
	waitJS(t, tb, 60*time.Second, `!!document.querySelector('#messages .msg.assistant[data-id] .msg-actions .copy') && !citegate.state.runs.size &&
		!!document.querySelector('#messages .msg.assistant sup.cite-ref a') && !!document.querySelector('#messages .msg.assistant button.src-preview')`,
		"the answer with its superscripts, sources and actions")

	// The source card: keyboard focus on the first superscript describes its source.
	tabUntil(t, tb, `#messages .msg.assistant sup.cite-ref a`, 80)
	// The lead comes from the stored excerpt (a request): wait until it is there, not loading.
	waitJS(t, tb, 15*time.Second, `!document.getElementById('src-card').hidden && document.querySelector('#src-card .src-card-title').textContent !== '' &&
		(() => { const l = document.querySelector('#src-card .src-card-lead'); return !l || (l.textContent !== '' && l.textContent !== citegate.T.excerptLoading); })()`, "the source card opens on focus")
	card := evalJS[string](t, tb, `document.getElementById('src-card').innerText`)
	assert.Contains(t, card, evalJS[string](t, tb, `document.querySelector('#messages .msg.assistant li.source a').textContent`), "the card names the first source")
	auditA11y(t, tb, "source card")
	shot(t, tb, "source-card")
	tb.do(t, 15*time.Second, chromedp.KeyEvent("\x1b"))
	waitJS(t, tb, 15*time.Second, `document.getElementById('src-card').hidden`, "Esc closes the card")

	// The excerpt panel: the page text the model was given, beside the answer.
	evalJS[bool](t, tb, `(document.querySelector('#messages details.sources').open = true, true)`)
	tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#messages .msg.assistant button.src-preview")))
	waitJS(t, tb, 15*time.Second, `!document.getElementById('excerpt').hidden && document.getElementById('excerpt-title').textContent !== '' && document.getElementById('excerpt-text').textContent.trim() !== ''`, "the excerpt panel shows the page text")
	checkExcerpt(t, tb)
	auditA11y(t, tb, "excerpt panel")
	shot(t, tb, "excerpt-panel")
	tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#excerpt-close")))
	waitJS(t, tb, 15*time.Second, `document.getElementById('excerpt').hidden`, "the panel closes")
	// The pointer rests over the header's share button now; move it off so no hover border shows.
	tb.do(t, 15*time.Second, chromedp.MouseEvent("mouseMoved", 700, 620))

	// The action bar under the answer, reached with the keyboard (copy focused, ring drawn).
	tabUntil(t, tb, `#messages .msg.assistant .msg-actions button.copy`, 80)
	require.True(t, evalJS[bool](t, tb, `document.activeElement.matches(':focus-visible')`), "copy shows its focus")
	labels := evalJS[[]string](t, tb, `[...document.querySelectorAll('#messages .msg.assistant .msg-actions button')].map((b) => b.getAttribute('aria-label') || b.textContent.trim())`)
	assert.GreaterOrEqual(t, len(labels), 4, "copy, regenerate and the two votes: %v", labels)
	auditA11y(t, tb, "message actions")
	shot(t, tb, "message-actions")

	// Dark mode: the keyboard reaches the main controls; each focus ring is visible and contrasts.
	for _, l := range []layout{desktopDark, phoneDark} {
		t.Run(l.Name, func(t *testing.T) {
			tb.setLayout(t, l)
			stops := tabThrough(t, tb, 120)
			want := []string{"#new-chat", "#input", "#send", "#share-btn", "button.act.copy", "button.act.regenerate"}
			if l.Mobile {
				// The chat list is in the drawer behind ☰.
				want = []string{"#menu-btn", "#input", "#send", "#share-btn", "button.act.copy", "button.act.regenerate"}
			}
			requireReachable(t, stops, want...)
			rings := focusRingContrasts(t, tb, 120)
			lowest := rings[0]
			for _, r := range rings {
				if r.Ratio < lowest.Ratio {
					lowest = r
				}
				if r.Ratio < 3 {
					t.Errorf("%s: the focus ring %s on %s contrasts %.2f:1 (< 3:1)", l.Name, r.Ring, r.Behind, r.Ratio)
				}
			}
			t.Logf("%s: %d focus stops; lowest ring contrast %.2f:1 (%s on %s)", l.Name, len(stops), lowest.Ratio, lowest.Ring, lowest.Behind)
			auditA11y(t, tb, "chat "+l.Name)
			if l.Mobile {
				// On the phone the excerpt panel is a bottom sheet over the chat.
				evalJS[bool](t, tb, `(document.querySelector('#messages .msg.assistant button.src-preview').scrollIntoView({block: 'center'}), true)`)
				tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#messages .msg.assistant button.src-preview")))
				waitJS(t, tb, 15*time.Second, `!document.getElementById('excerpt').hidden && document.getElementById('excerpt-title').textContent !== '' && document.getElementById('excerpt-text').textContent.trim() !== ''`, "the excerpt sheet shows the page text")
				geo := evalJS[map[string]float64](t, tb, `(() => { const x = document.getElementById('excerpt').getBoundingClientRect(); return {b: x.bottom, w: x.width, h: innerHeight, iw: innerWidth}; })()`)
				assert.InDelta(t, geo["h"], geo["b"], 1, "a bottom sheet: %v", geo)
				assert.InDelta(t, geo["iw"], geo["w"], 1, "spanning the screen: %v", geo)
				checkExcerpt(t, tb)
				auditA11y(t, tb, "excerpt sheet "+l.Name)
				shot(t, tb, "excerpt-phone-dark")
				tb.do(t, 15*time.Second, chromedp.KeyEvent("\x1b"))
				waitJS(t, tb, 15*time.Second, `document.getElementById('excerpt').hidden`, "Esc closes the sheet")
			}
		})
	}
	tb.setLayout(t, desktopLight)
}

// checkExcerpt checks the open excerpt panel: its site chip says what the sources list says (not the
// title a second time), and no short table cell (four characters or fewer) wraps onto a second line.
func checkExcerpt(t *testing.T, tb *tab) {
	t.Helper()
	assert.Equal(t, evalJS[string](t, tb, `document.querySelector('#messages .msg.assistant li.source .src-domain').textContent`),
		evalJS[string](t, tb, `(document.querySelector('#excerpt-meta .src-domain') || {}).textContent || ''`), "the panel names the site as the sources list does")
	wrapped := evalJS[[]string](t, tb, `[...document.querySelectorAll('#excerpt-text.md th, #excerpt-text.md td')].filter((c) => {
		const s = c.textContent.trim(); if (!s || [...s].length > 4) return false;
		const r = document.createRange(); r.selectNodeContents(c);
		return new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size > 1;
	}).map((c) => c.textContent.trim())`)
	assert.Empty(t, wrapped, "short table cells of the excerpt wrap")
}

// tabUntil presses Tab (from the top of the document) until the focused element matches sel, and
// fails when max presses do not get there.
func tabUntil(t *testing.T, tb *tab, sel string, max int) {
	t.Helper()
	evalJS[bool](t, tb, `(document.activeElement && document.activeElement.blur(), true)`)
	tabOnUntil(t, tb, sel, max)
}

// tabOnUntil presses Tab from where the focus is until the focused element matches sel, and
// checks that it shows its focus (:focus-visible with an outline or shadow drawn).
func tabOnUntil(t *testing.T, tb *tab, sel string, max int) {
	t.Helper()
	keyUntil(t, tb, sel, max, false)
}

// shiftTabOnUntil is tabOnUntil backwards (Shift+Tab).
func shiftTabOnUntil(t *testing.T, tb *tab, sel string, max int) {
	t.Helper()
	keyUntil(t, tb, sel, max, true)
}

func keyUntil(t *testing.T, tb *tab, sel string, max int, back bool) {
	t.Helper()
	var opts []chromedp.KeyOption
	if back {
		opts = append(opts, chromedp.KeyModifiers(chromedp.ModifierShift))
	}
	for range max {
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\t", opts...))
		if evalJS[bool](t, tb, `document.activeElement.matches(`+jsString(sel)+`)`) {
			requireFocusShown(t, tb, sel)
			return
		}
	}
	t.Fatalf("%s is not reached with %d presses of Tab", sel, max)
}

// requireFocusShown checks that the focused element matches sel and draws its focus.
func requireFocusShown(t *testing.T, tb *tab, sel string) {
	t.Helper()
	ok := evalJS[bool](t, tb, `(() => { const e = document.activeElement; if (!e || !e.matches(`+jsString(sel)+`)) return false;
		const cs = getComputedStyle(e); const r = e.getBoundingClientRect();
		return e.matches(':focus-visible') && ((cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) > 0) || cs.boxShadow !== 'none') && r.width > 0 && r.height > 0; })()`)
	if !ok {
		t.Errorf("focus is not visibly on %s (focused: %s)", sel, evalJS[string](t, tb, `document.activeElement ? document.activeElement.outerHTML.slice(0, 160) : 'none'`))
	}
}

// ringContrast is one focus stop's outline colour against the colour behind it.
type ringContrast struct {
	Desc   string  `json:"desc"`
	Ring   string  `json:"ring"`
	Behind string  `json:"behind"`
	Ratio  float64 `json:"ratio"`
}

// focusRingContrasts presses Tab up to max times from the top and, at every stop that draws an
// outline, measures the outline's contrast against the background it is drawn on: the element's
// own (a ring drawn inside, negative offset) or the nearest ancestor's with an opaque background.
func focusRingContrasts(t *testing.T, tb *tab, max int) []ringContrast {
	t.Helper()
	evalJS[bool](t, tb, `(document.activeElement && document.activeElement.blur(), window.scrollTo(0, 0), true)`)
	var out []ringContrast
	first := ""
	for range max {
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\t"))
		raw := evalJS[[]byte](t, tb, `(() => {
			const e = document.activeElement;
			if (!e || e === document.body) return {desc: 'body', ring: '', behind: '', ratio: 0};
			let d = e.tagName.toLowerCase() + (e.id ? '#' + e.id : '');
			if (typeof e.className === 'string' && e.className) d += '.' + e.className.trim().split(/\s+/).join('.');
			const cs = getComputedStyle(e);
			if (cs.outlineStyle === 'none' || parseFloat(cs.outlineWidth) === 0) return {desc: d, ring: '', behind: '', ratio: 0};
			const rgb = (s) => { const m = s.match(/rgba?\(([^)]+)\)/); if (!m) return null; const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
			let n = parseFloat(cs.outlineOffset) < 0 ? e : e.parentElement, bg = null;
			for (; n; n = n.parentElement) { const c = rgb(getComputedStyle(n).backgroundColor); if (c && c.a >= 0.99) { bg = c; break; } }
			if (!bg) bg = rgb(getComputedStyle(document.documentElement).backgroundColor) || {r: 255, g: 255, b: 255, a: 1};
			const ring = rgb(cs.outlineColor);
			const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
			const a = lum(ring), b = lum(bg);
			return {desc: d, ring: cs.outlineColor, behind: 'rgb(' + bg.r + ', ' + bg.g + ', ' + bg.b + ')', ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)};
		})()`)
		var r ringContrast
		require.NoError(t, json.Unmarshal(raw, &r))
		if first == "" {
			first = r.Desc
		} else if r.Desc == first {
			break
		}
		if r.Ring != "" {
			r.Behind = fmt.Sprintf("%s (behind %s)", r.Behind, strings.SplitN(r.Desc, ".", 2)[0])
			out = append(out, r)
		}
	}
	require.NotEmpty(t, out, "some focus stop draws an outline")
	return out
}

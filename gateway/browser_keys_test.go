package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Keyboard and touch helpers for the phone-layout browser tests: move focus with Tab the way a
// keyboard user does until a given control has it, press it with Enter or Space, tap with touch.

// focusedStop describes the focused element as tabThrough does (description, focus ring drawn,
// element has a box).
const focusedStopJS = `(() => {
	const e = document.activeElement;
	if (!e || e === document.body) return {desc: 'body', visible: false, onPage: false};
	let d = e.tagName.toLowerCase() + (e.id ? '#' + e.id : '');
	if (typeof e.className === 'string' && e.className) d += '.' + e.className.trim().split(/\s+/).join('.');
	const label = e.getAttribute('aria-label');
	if (label) d += '[' + label + ']';
	const cs = getComputedStyle(e);
	const drawn = (cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) > 0) || cs.boxShadow !== 'none';
	const r = e.getBoundingClientRect();
	return {desc: d, visible: e.matches(':focus-visible') && drawn, onPage: r.width > 0 && r.height > 0};
})()`

// tabTo presses Tab (Shift+Tab when back) from wherever focus is until the focused element
// matches the CSS selector sel, at most max times. It fails when sel is not reached, and when the
// element reached does not show its focus (a drawn :focus-visible ring) or has no box.
func tabTo(t *testing.T, tb *tab, sel string, back bool, max int) focusStop {
	t.Helper()
	var order []string
	for range max {
		if back {
			tb.do(t, 15*time.Second, chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
		} else {
			tb.do(t, 15*time.Second, chromedp.KeyEvent("\t"))
		}
		if evalJS[bool](t, tb, `!!document.activeElement && document.activeElement.matches(`+jsString(sel)+`)`) {
			var s focusStop
			require.NoError(t, json.Unmarshal(evalJS[[]byte](t, tb, focusedStopJS), &s))
			require.True(t, s.Visible, "focus on %s (%s) is not visible", sel, s.Desc)
			require.True(t, s.OnPage, "focus went to %s (%s), which has no box", sel, s.Desc)
			return s
		}
		order = append(order, evalJS[string](t, tb, `(e => e ? e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (typeof e.className === 'string' && e.className ? '.' + e.className.trim().split(/\s+/).join('.') : '') : 'none')(document.activeElement)`))
	}
	t.Fatalf("%s is not reached with %d presses of Tab (back=%v); focus order: %s", sel, max, back, strings.Join(order, " → "))
	return focusStop{}
}

// press sends one key to the focused element: "\r" is Enter, " " is Space, "\x1b" is Escape.
func press(t *testing.T, tb *tab, key string) {
	t.Helper()
	tb.do(t, 15*time.Second, chromedp.KeyEvent(key))
}

// smallTargets lists the elements matching sel (visible ones only) whose box is smaller than
// min×min CSS pixels, as "class w×h".
func smallTargets(t *testing.T, tb *tab, sel string, min int) []string {
	t.Helper()
	return evalJS[[]string](t, tb, `[...document.querySelectorAll(`+jsString(sel)+`)].filter((b) => {
		const r = b.getBoundingClientRect(); return r.width > 0 && (r.width < `+itoa(uint64(min))+` - 0.5 || r.height < `+itoa(uint64(min))+` - 0.5);
	}).map((b) => { const r = b.getBoundingClientRect(); return (b.className || b.tagName) + ' ' + Math.round(r.width) + '×' + Math.round(r.height); })`)
}

// setTouch turns touch emulation on or off for the tab (on: the page sees a touch screen and
// input.SynthesizeTapGesture taps with pointerType "touch").
func setTouch(t *testing.T, tb *tab, on bool) {
	t.Helper()
	tb.do(t, 15*time.Second, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		p := emulation.SetTouchEmulationEnabledParams{Enabled: on}
		if on {
			p.MaxTouchPoints = 5
		}
		_, err := chromedp.Call(ctx, emulation.SetTouchEmulationEnabled, p)
		return err
	}))
}

// tap taps the centre of the first element matching sel (scrolled into view when it is not) with
// touch events as a phone sends them (needs setTouch): pointerdown/up of type "touch", then the
// compatibility mouse events, focus and the click a tap produces.
func tap(t *testing.T, tb *tab, sel string) {
	t.Helper()
	pos := evalJS[map[string]float64](t, tb, `(() => { const e = document.querySelector(`+jsString(sel)+`);
		let r = e.getBoundingClientRect();
		if (r.top < 0 || r.bottom > innerHeight) { e.scrollIntoView({block: 'center'}); r = e.getBoundingClientRect(); }
		return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()`)
	tb.do(t, 15*time.Second, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, input.DispatchTouchEvent, input.DispatchTouchEventParams{
			Type: input.DispatchTouchEventTypeTouchStart, TouchPoints: []*input.TouchPoint{{X: pos["x"], Y: pos["y"]}},
		}); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, input.DispatchTouchEvent, input.DispatchTouchEventParams{
			Type: input.DispatchTouchEventTypeTouchEnd, TouchPoints: []*input.TouchPoint{},
		})
		return err
	}))
}

// release lets a gated model write its next step, failing (instead of hanging) when the model
// does not take it.
func release(t *testing.T, next chan struct{}) {
	t.Helper()
	select {
	case next <- struct{}{}:
	case <-time.After(30 * time.Second):
		t.Fatal("the model did not ask for its next step")
	}
}

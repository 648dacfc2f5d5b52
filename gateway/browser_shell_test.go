package gateway_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserFrame checks the page frame at 375 px and 1280 px, light and dark: a stored chat opens
// and renders, the accessibility audit passes, and the keyboard reaches the main controls.
func TestBrowserFrame(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	id := seedChat(t, stack, "年假有几天", 6)
	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.do(t, 10*time.Second, chromedp.Navigate(stack.URL+"/#s="+id))
	waitConnected(t, tb)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 6`, "history renders")
	eachLayout(t, tb, func(t *testing.T, l layout) {
		auditA11y(t, tb, "chat "+l.Name)
		shot(t, tb, "frame-"+l.Name)
	})
	// Every answer adds its own stops (superscripts, copy, regenerate, votes), so walk the whole cycle.
	stops := tabThrough(t, tb, 200)
	requireReachable(t, stops, "#new-chat", "#input", "#send", "#share-btn")
}

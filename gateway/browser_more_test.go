package gateway_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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
	tb.do(t, 10*time.Second, chromedp.Navigate(stack.URL+"/#s="+id))
	waitConnected(t, tb)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 50`, "the newest page renders")
	waitJS(t, tb, 10*time.Second, `!!document.querySelector('#messages .load-earlier')`, "a load-earlier button above it")
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
	waitJS(t, tb, 10*time.Second, `!document.querySelector('#messages .load-earlier')`, "no button once everything is shown")
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

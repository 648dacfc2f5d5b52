package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// touchTarget is the smallest box, in CSS pixels, a control on the phone may have: the 44 px of
// WCAG 2.5.5 and Apple's guidelines, so a thumb hits what it aims at.
const touchTarget = 44

// TestBrowserMessageActionsPhone runs the message actions on a 375 px phone in dark mode with the
// keyboard only (Tab to the action, Enter or Space, its focus visible): copy the answer, vote up
// and save a comment (the comment form passes the accessibility audit), switch to down, regenerate and step back
// to the first version, edit and resend the question, copy a code block. Every action is a touch
// target of at least 44×44 px and on screen.
func TestBrowserMessageActionsPhone(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	br := newBrowser(t)
	tb := loginTab(t, stack, br)
	grantClipboard(t, tb, stack.URL)
	tb.setLayout(t, phoneDark)

	tb.do(t, 15*time.Second, chromedp.SetValue(chromedp.CSS("#input"), "年假有几天？"), chromedp.Click(chromedp.CSS("#send")))
	waitJS(t, tb, 60*time.Second, `!!document.querySelector('#messages .msg.assistant[data-id] .msg-actions .copy') && !citegate.state.runs.size && !!document.querySelector('#messages .msg.user[data-id] .msg-actions .edit')`, "the answer gets its actions")
	sid := evalJS[string](t, tb, `citegate.state.current`)
	var answer store.Message
	for _, m := range messagesOf(t, stack, sid) {
		if m.Role == store.RoleAssistant && len(m.ToolCalls) == 0 {
			answer = m
		}
	}
	require.NotZero(t, answer.ID)

	const bar = `#messages .msg:not([hidden]) .msg-actions button`
	assert.Empty(t, smallTargets(t, tb, bar, touchTarget), "action buttons are touch-sized on the phone")
	off := evalJS[[]string](t, tb, `[...document.querySelectorAll(`+jsString(bar)+`)].filter((b) => {
		const r = b.getBoundingClientRect(); return r.width === 0 || r.left < 0 || r.right > innerWidth + 1;
	}).map((b) => b.className)`)
	assert.Empty(t, off, "every action button is on screen")

	// Keyboard from the composer: back to the answer's copy button.
	focusInput := func() { evalJS[bool](t, tb, `(document.getElementById('input').focus(), true)`) }
	const ans = `#messages .msg.assistant:not([hidden]) .msg-actions `
	t.Run("copy answer", func(t *testing.T) {
		focusInput()
		tabTo(t, tb, ans+`.copy`, true, 40)
		press(t, tb, "\r")
		waitJS(t, tb, 15*time.Second, `!!document.querySelector('`+ans+`.copy.done')`, "copy confirms")
		got := clipboard(t, tb)
		assert.NotContains(t, got, "[^")
		assert.Contains(t, got, "\n来源：\n[1] ")
	})

	t.Run("feedback", func(t *testing.T) {
		tabTo(t, tb, ans+`.vote.up`, false, 6)
		press(t, tb, " ")
		waitJS(t, tb, 15*time.Second, `document.querySelector('`+ans+`.vote.up').getAttribute('aria-pressed') === 'true' && !!document.activeElement && document.activeElement.matches('.feedback-form input')`, "vote pressed, comment field focused")
		assert.Empty(t, smallTargets(t, tb, `.feedback-form input, .feedback-form button`, touchTarget), "the comment form is touch-sized")
		inView := evalJS[bool](t, tb, `(() => { const r = document.querySelector('.feedback-form').getBoundingClientRect(); return r.left >= 0 && r.right <= innerWidth + 1; })()`)
		assert.True(t, inView, "the comment form fits the screen")
		auditA11y(t, tb, "feedback comment form phone-dark")
		screenshot(t, tb, "feedback-form-phone-dark")
		tb.do(t, 15*time.Second, chromedp.KeyEvent("清楚准确"))
		tabTo(t, tb, `.feedback-form button[type=submit]`, false, 2)
		press(t, tb, " ")
		waitJS(t, tb, 15*time.Second, `!document.querySelector('.feedback-form')`, "comment saved")
		m, err := stack.Store.GetMessage(context.Background(), answer.ID)
		require.NoError(t, err)
		var md struct {
			Feedback struct{ Vote, Comment string }
		}
		require.NoError(t, json.Unmarshal(m.Metadata, &md))
		assert.Equal(t, "up", md.Feedback.Vote)
		assert.Equal(t, "清楚准确", md.Feedback.Comment)
		// Down instead: Space on 👎 switches the vote (the comment is kept), Escape closes the field.
		focusInput()
		tabTo(t, tb, ans+`.vote.down`, true, 40)
		press(t, tb, " ")
		waitJS(t, tb, 15*time.Second, `document.querySelector('`+ans+`.vote.down').getAttribute('aria-pressed') === 'true' && document.querySelector('`+ans+`.vote.up').getAttribute('aria-pressed') === 'false' && !!document.activeElement && document.activeElement.matches('.feedback-form input')`, "vote switched to down, comment field focused")
		assert.Equal(t, "清楚准确", evalJS[string](t, tb, `document.activeElement.value`), "the comment is kept")
		press(t, tb, "\x1b")
		waitJS(t, tb, 15*time.Second, `!document.querySelector('.feedback-form')`, "Escape closes the comment field")
		m, err = stack.Store.GetMessage(context.Background(), answer.ID)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(m.Metadata, &md))
		assert.Equal(t, "down", md.Feedback.Vote)
		assert.Equal(t, "清楚准确", md.Feedback.Comment)
	})

	t.Run("regenerate", func(t *testing.T) {
		focusInput()
		tabTo(t, tb, ans+`.regenerate`, true, 40)
		press(t, tb, "\r")
		waitJS(t, tb, 60*time.Second, `(() => {
			const v = [...document.querySelectorAll('#messages .msg.assistant')].filter((a) => !a.hidden);
			return v.length === 1 && !!v[0].querySelector('.versions .count') && v[0].querySelector('.versions .count').textContent === '2/2' && !citegate.state.runs.size;
		})()`, "the new version is shown as 2/2")
		assert.Empty(t, smallTargets(t, tb, bar, touchTarget), "the version buttons are touch-sized too")
		focusInput()
		tabTo(t, tb, ans+`.versions .prev`, true, 40)
		press(t, tb, "\r")
		waitJS(t, tb, 15*time.Second, `(() => {
			const v = [...document.querySelectorAll('#messages .msg.assistant')].filter((a) => !a.hidden);
			return v.length === 1 && v[0].dataset.id === '`+itoa(answer.ID)+`' && v[0].querySelector('.versions .count').textContent === '1/2';
		})()`, "Enter on ‹ shows the first answer")
	})

	t.Run("edit and resend", func(t *testing.T) {
		focusInput()
		tabTo(t, tb, `#messages .msg.user:not([hidden]) .msg-actions .edit`, true, 60)
		press(t, tb, "\r")
		waitJS(t, tb, 15*time.Second, `!!document.activeElement && document.activeElement.matches('.edit-form textarea')`, "the editor has focus")
		assert.Empty(t, smallTargets(t, tb, `.edit-form button`, touchTarget), "the editor's buttons are touch-sized")
		evalJS[bool](t, tb, `(document.activeElement.select(), true)`)
		tb.do(t, 15*time.Second, chromedp.KeyEvent("病假怎么请？"))
		press(t, tb, "\r")
		waitJS(t, tb, 60*time.Second, `(() => {
			const us = [...document.querySelectorAll('#messages .msg.user')].filter((a) => !a.hidden);
			return us.length === 2 && us[1].textContent.includes('病假怎么请') && !citegate.state.runs.size &&
				!!document.querySelector('#messages .msg.assistant:last-child[data-id] .msg-actions');
		})()`, "the edited question runs below")
		var q store.Message
		for _, m := range messagesOf(t, stack, sid) {
			if m.Role == store.RoleUser {
				q = m
			}
		}
		assert.Equal(t, "病假怎么请？", q.Content)
	})

	t.Run("copy code", func(t *testing.T) {
		code := seedChat(t, stack, "代码", 2)
		tb.do(t, 15*time.Second, chromedp.Navigate(stack.URL+"/#s="+code))
		waitConnected(t, tb)
		waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .code-wrap .copy-code')`, "the code block has its button")
		assert.Empty(t, smallTargets(t, tb, `#messages .copy-code`, touchTarget), "copy code is touch-sized")
		focusInput()
		tabTo(t, tb, `#messages .copy-code`, true, 40)
		press(t, tb, " ")
		waitJS(t, tb, 15*time.Second, `!!document.querySelector('#messages .copy-code.done')`, "copy code confirms")
		assert.Equal(t, "curl -s https://hr.example.com/api/leave\n", clipboard(t, tb))
		auditA11y(t, tb, "message actions phone-dark")
	})
	tb.setLayout(t, desktopLight)
}

package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// grantClipboard lets the tab's page read and write the clipboard without a prompt, so a test can
// read back what a copy button put there.
func grantClipboard(t *testing.T, tb *tab, origin string) {
	t.Helper()
	bc := chromedp.FromContext(tb.ctx).BrowserContextID
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		_, err := chromedp.CallBrowser(tb.ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name, AllowWithoutSanitization: true},
			Setting:    browser.PermissionSettingGranted, Origin: origin, BrowserContextID: bc,
		})
		require.NoError(t, err, "grant %s", name)
	}
}

// clipboard reads the clipboard as the page sees it.
func clipboard(t *testing.T, tb *tab) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err, "read the clipboard")
	return v
}

// click clicks the first element matching the CSS selector (scrolled into view first).
func click(t *testing.T, tb *tab, sel string) {
	t.Helper()
	waitJS(t, tb, 30*time.Second, `!!document.querySelector(`+jsString(sel)+`)`, "element "+sel)
	tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS(sel)))
}

// messagesOf reads a chat's stored messages.
func messagesOf(t *testing.T, stack *browserStack, sessionID string) []store.Message {
	t.Helper()
	msgs, err := stack.Store.ListMessages(context.Background(), sessionID)
	require.NoError(t, err)
	return msgs
}

// TestBrowserMessageActions drives every message action through the page as a person would:
// copy an answer (with its sources, from the stored record), copy a code block, vote and comment,
// regenerate (versions ‹ 1/2 ›), edit and resend; checks them at 375 px and 1280 px, light and
// dark, with the accessibility audit, and reaches each with the keyboard.
func TestBrowserMessageActions(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	br := newBrowser(t)
	tb := loginTab(t, stack, br)
	grantClipboard(t, tb, stack.URL)

	// A live answer from the offline model, asked through the composer.
	tb.do(t, 30*time.Second,
		chromedp.SetValue(chromedp.CSS("#input"), "年假有几天？"),
		chromedp.Click(chromedp.CSS("#send")),
	)
	waitJS(t, tb, 60*time.Second, `!!document.querySelector('#messages .msg.assistant[data-id] .msg-actions .copy') && !citegate.state.runs.size`, "the answer gets its actions")
	sid := evalJS[string](t, tb, `citegate.state.current`)
	require.NotEmpty(t, sid)
	msgs := messagesOf(t, stack, sid)
	var answer store.Message
	for _, m := range msgs {
		if m.Role == store.RoleAssistant && len(m.ToolCalls) == 0 {
			answer = m
		}
	}
	require.NotZero(t, answer.ID)
	require.Contains(t, answer.Content, "[^1^]", "the offline model cites its sources")

	t.Run("copy answer", func(t *testing.T) {
		click(t, tb, `#messages .msg.assistant .msg-actions .copy`)
		waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .msg.assistant .msg-actions .copy.done')`, "copy confirms")
		got := clipboard(t, tb)
		assert.NotContains(t, got, "[^", "no raw marker is copied")
		assert.Contains(t, got, "[1]")
		assert.Contains(t, got, "\n来源：\n[1] ")
		assert.Contains(t, got, stack.URL+"/kb/", "each source with its URL")
	})

	t.Run("feedback", func(t *testing.T) {
		click(t, tb, `#messages .msg.assistant .msg-actions .vote.up`)
		waitJS(t, tb, 30*time.Second, `document.querySelector('#messages .msg.assistant .vote.up').getAttribute('aria-pressed') === 'true' && document.activeElement && document.activeElement.closest('.feedback-form') !== null`, "vote pressed, comment field focused")
		tb.do(t, 30*time.Second, chromedp.SendKeys(chromedp.CSS(".feedback-form input"), "清楚准确\r"))
		waitJS(t, tb, 30*time.Second, `!document.querySelector('.feedback-form')`, "comment saved")
		m, err := stack.Store.GetMessage(context.Background(), answer.ID)
		require.NoError(t, err)
		var md struct {
			Feedback struct{ Vote, Comment, By string }
		}
		require.NoError(t, json.Unmarshal(m.Metadata, &md))
		assert.Equal(t, "up", md.Feedback.Vote)
		assert.Equal(t, "清楚准确", md.Feedback.Comment)
		assert.Equal(t, stack.User.ID, md.Feedback.By)
		// Reopened, the vote is still shown; switching it to down is one click.
		tb.do(t, 30*time.Second, chromedp.Reload())
		waitConnected(t, tb)
		waitJS(t, tb, 30*time.Second, `(() => { const b = document.querySelector('#messages .msg.assistant .vote.up'); return b && b.getAttribute('aria-pressed') === 'true'; })()`, "vote shown after reload")
		click(t, tb, `#messages .msg.assistant .msg-actions .vote.down`)
		waitJS(t, tb, 30*time.Second, `document.querySelector('#messages .msg.assistant .vote.down').getAttribute('aria-pressed') === 'true' && document.querySelector('#messages .msg.assistant .vote.up').getAttribute('aria-pressed') === 'false'`, "vote switched")
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\x1b")) // the comment field closes with Escape
	})

	t.Run("regenerate", func(t *testing.T) {
		click(t, tb, `#messages .msg.assistant .msg-actions .regenerate`)
		waitJS(t, tb, 60*time.Second, `(() => {
			const v = [...document.querySelectorAll('#messages .msg.assistant')].filter((a) => !a.hidden);
			return v.length === 1 && !!v[0].querySelector('.versions .count') && v[0].querySelector('.versions .count').textContent === '2/2' && !citegate.state.runs.size;
		})()`, "the new version is shown as 2/2")
		assert.Equal(t, 1, evalJS[int](t, tb, `[...document.querySelectorAll('#messages .msg.user')].filter((a) => !a.hidden).length`), "the question is shown once")
		click(t, tb, `#messages .msg.assistant:not([hidden]) .versions .prev`)
		waitJS(t, tb, 30*time.Second, `(() => {
			const v = [...document.querySelectorAll('#messages .msg.assistant')].filter((a) => !a.hidden);
			return v.length === 1 && v[0].dataset.id === '`+itoa(answer.ID)+`' && v[0].querySelector('.versions .count').textContent === '1/2';
		})()`, "the first answer is one click back")
		msgs := messagesOf(t, stack, sid)
		users := 0
		for _, m := range msgs {
			if m.Role == store.RoleUser {
				users++
				if users == 2 {
					assert.JSONEq(t, `{"regenerateOf":`+itoa(msgs[0].ID)+`}`, string(m.Metadata))
				}
			}
		}
		assert.Equal(t, 2, users)
	})

	t.Run("edit and resend", func(t *testing.T) {
		click(t, tb, `#messages .msg.user:not([hidden]) .msg-actions .edit`)
		waitJS(t, tb, 30*time.Second, `document.activeElement && document.activeElement.matches('.edit-form textarea')`, "the editor has focus")
		tb.do(t, 30*time.Second,
			chromedp.SetValue(chromedp.CSS(".edit-form textarea"), "病假怎么请？"),
			chromedp.SendKeys(chromedp.CSS(".edit-form textarea"), "\r"),
		)
		waitJS(t, tb, 60*time.Second, `(() => {
			const us = [...document.querySelectorAll('#messages .msg.user')].filter((a) => !a.hidden);
			return us.length === 2 && us[1].textContent.includes('病假怎么请') && !citegate.state.runs.size &&
				!!document.querySelector('#messages .msg.assistant:last-child[data-id] .msg-actions');
		})()`, "the edited question runs below, the earlier ones stay")
		msgs := messagesOf(t, stack, sid)
		last := msgs[len(msgs)-1]
		var q store.Message
		for _, m := range msgs {
			if m.Role == store.RoleUser {
				q = m
			}
		}
		assert.Equal(t, "病假怎么请？", q.Content)
		assert.JSONEq(t, `{"editOf":`+itoa(msgs[0].ID)+`}`, string(q.Metadata))
		assert.Equal(t, store.RoleAssistant, last.Role)
		tb.do(t, 30*time.Second, chromedp.Reload())
		waitConnected(t, tb)
		waitJS(t, tb, 30*time.Second, `[...document.querySelectorAll('#messages .msg.user .role .edited')].length === 1`, "the edited question is labelled in the history")
	})

	t.Run("copy code", func(t *testing.T) {
		code := seedChat(t, stack, "代码", 2)
		tb.do(t, 30*time.Second, chromedp.Navigate(stack.URL+"/#s="+code))
		waitConnected(t, tb)
		click(t, tb, `#messages .code-wrap .copy-code`)
		waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .copy-code.done')`, "copy code confirms")
		assert.Equal(t, "curl -s https://hr.example.com/api/leave\n", clipboard(t, tb))
	})

	// Every action is reachable with the keyboard and shows its focus; the layouts pass the audit
	// and keep the actions on screen.
	tb.do(t, 30*time.Second, chromedp.Navigate(stack.URL+"/#s="+sid))
	waitConnected(t, tb)
	waitJS(t, tb, 30*time.Second, `!!document.querySelector('#messages .msg.assistant:not([hidden]) .msg-actions .versions')`, "history with versions")
	stops := tabThrough(t, tb, 80)
	requireReachable(t, stops, "button.act.copy", "button.act.regenerate", "button.act.vote.up", "button.act.vote.down",
		"button.act.edit", "button.act.prev")
	eachLayout(t, tb, func(t *testing.T, l layout) {
		off := evalJS[[]string](t, tb, `[...document.querySelectorAll('#messages .msg:not([hidden]) .msg-actions button')].filter((b) => {
			const r = b.getBoundingClientRect(); return r.width === 0 || r.left < 0 || r.right > innerWidth + 1;
		}).map((b) => b.className)`)
		assert.Empty(t, off, "every action button is on screen at %s", l.Name)
		auditA11y(t, tb, "message actions "+l.Name)
		shot(t, tb, "actions-"+l.Name)
	})
}

// TestBrowserChats searches, renames, exports and deletes chats through the page.
func TestBrowserChats(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	leave, expense, tok := seedSearchableChats(t, stack)
	ctx := context.Background()
	br := newBrowser(t)
	tb := loginTab(t, stack, br)
	tb.do(t, 30*time.Second, chromedp.Navigate(stack.URL+"/#s="+leave))
	waitConnected(t, tb)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 2`, "chat opens")

	t.Run("search", func(t *testing.T) {
		tb.do(t, 30*time.Second, chromedp.SendKeys(chromedp.CSS("#chat-search"), "差旅发票"))
		waitJS(t, tb, 15*time.Second, `!document.getElementById('search-results').hidden && document.querySelectorAll('#search-results a.snippet').length === 1`, "one matching message")
		assert.Contains(t, evalJS[string](t, tb, `document.querySelector('#search-results a.snippet').textContent`), "差旅发票要原件吗")
		click(t, tb, `#search-results a.snippet`)
		waitJS(t, tb, 30*time.Second, `citegate.state.current === `+jsString(expense)+` && document.activeElement && document.activeElement.matches('.msg.user') && document.activeElement.textContent.includes('差旅发票')`, "the result opens its chat at the message")
		tb.do(t, 30*time.Second, chromedp.SetValue(chromedp.CSS("#chat-search"), "没有这样的内容"), chromedp.SendKeys(chromedp.CSS("#chat-search"), " "))
		waitJS(t, tb, 15*time.Second, `document.querySelectorAll('#search-results li').length === 0 && !document.querySelector('.search-note').hidden`, "no results is said")
		tb.do(t, 15*time.Second, chromedp.Focus(chromedp.CSS("#chat-search")), chromedp.KeyEvent("\x1b"))
		waitJS(t, tb, 15*time.Second, `!document.getElementById('sessions').hidden && document.getElementById('search-results').hidden`, "Escape brings the list back")
	})

	t.Run("search reaches older pages", func(t *testing.T) {
		// A chat longer than one history page, the match in its first message.
		long, err := stack.Store.CreateSession(ctx, store.Session{UserID: stack.User.ID, Channel: "desktop", Title: "长对话"})
		require.NoError(t, err)
		first, err := stack.Store.AppendMessage(ctx, store.Message{SessionID: long.ID, Role: store.RoleUser, Content: "最早的问题：出差补贴标准"})
		require.NoError(t, err)
		for i := range 130 {
			m := store.Message{SessionID: long.ID, Role: store.RoleUser, Content: "第 " + itoa(uint64(i)) + " 条"}
			if i%2 == 1 {
				m.Role = store.RoleAssistant
			}
			_, err := stack.Store.AppendMessage(ctx, m)
			require.NoError(t, err)
		}
		tb.do(t, 30*time.Second, chromedp.SetValue(chromedp.CSS("#chat-search"), "出差补贴"), chromedp.SendKeys(chromedp.CSS("#chat-search"), " "))
		waitJS(t, tb, 15*time.Second, `document.querySelectorAll('#search-results a.snippet').length === 1`, "the old message is found")
		click(t, tb, `#search-results a.snippet`)
		waitJS(t, tb, 60*time.Second, `!!document.getElementById('msg-`+itoa(first.ID)+`') && document.activeElement === document.getElementById('msg-`+itoa(first.ID)+`')`, "earlier pages load until the match is on the page")
		tb.do(t, 15*time.Second, chromedp.Focus(chromedp.CSS("#chat-search")), chromedp.KeyEvent("\x1b"))
		tb.do(t, 30*time.Second, chromedp.Navigate(stack.URL+"/#s="+expense))
		waitConnected(t, tb)
	})

	t.Run("rename", func(t *testing.T) {
		// The chat must be open (its history rendered) before the title is edited: a history that
		// arrives later redraws the header under the test's feet.
		waitJS(t, tb, 30*time.Second, `window.citegate.state.current === `+jsString(expense)+` && document.querySelectorAll('#messages .msg').length > 0 && !document.querySelector('#messages p.empty')`, "the chat is open")
		click(t, tb, `.chat-menu summary`)
		click(t, tb, `.chat-menu .rename`)
		waitJS(t, tb, 15*time.Second, `document.activeElement && document.activeElement.matches('#rename-form input')`, "title field focused")
		tb.do(t, 30*time.Second, chromedp.SetValue(chromedp.CSS("#rename-form input"), "差旅报销"), chromedp.SendKeys(chromedp.CSS("#rename-form input"), "\r"))
		waitJS(t, tb, 30*time.Second, `document.getElementById('chat-title').textContent === '差旅报销' && [...document.querySelectorAll('#sessions a')].some((a) => a.textContent === '差旅报销')`, "renamed everywhere")
		s, err := stack.Store.GetSession(ctx, expense)
		require.NoError(t, err)
		assert.Equal(t, "差旅报销", s.Title)
	})

	t.Run("export", func(t *testing.T) {
		click(t, tb, `.chat-menu summary`)
		md := evalJS[string](t, tb, `document.querySelector('.chat-menu .export-md').href`)
		jsonl := evalJS[string](t, tb, `document.querySelector('.chat-menu .export-jsonl').href`)
		assert.True(t, strings.HasSuffix(md, "/api/sessions/"+expense+"/export.md?lang=zh"), md)
		assert.True(t, strings.HasSuffix(jsonl, "/api/sessions/"+expense+"/export.jsonl"), jsonl)
		// The links work with the page's own session cookie.
		ctx2, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
		defer cancel()
		text, err := chromedp.Run(ctx2, chromedp.Evaluate[string](`fetch(document.querySelector('.chat-menu .export-md').href).then((r) => r.text())`, chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		assert.Contains(t, text, "# 差旅报销")
		assert.Contains(t, text, "年假天数按工龄计算¹；申请需提前三天在系统提交²")
		assert.Contains(t, text, "**来源**")
		assert.NotContains(t, text, "[^")
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\x1b"))
	})

	eachLayout(t, tb, func(t *testing.T, l layout) {
		click(t, tb, `.chat-menu summary`)
		waitJS(t, tb, 15*time.Second, `(() => { const r = document.querySelector('.chat-menu-body').getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth + 1; })()`, "the menu fits the screen at "+l.Name)
		auditA11y(t, tb, "chat menu "+l.Name)
		shot(t, tb, "chat-menu-"+l.Name)
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\x1b"))
	})

	t.Run("delete", func(t *testing.T) {
		status, _ := get(t, stack.URL+"/s/"+tok)
		require.Equal(t, http.StatusOK, status)
		click(t, tb, `.chat-menu summary`)
		click(t, tb, `.chat-menu .delete`)
		waitJS(t, tb, 15*time.Second, `!document.querySelector('.delete-confirm').hidden && document.activeElement && document.activeElement.matches('.delete-no')`, "confirmation asked, Cancel focused")
		click(t, tb, `.delete-confirm .delete-yes`)
		waitJS(t, tb, 30*time.Second, `citegate.state.current === null && ![...document.querySelectorAll('#sessions a')].some((a) => a.dataset.id === `+jsString(expense)+`)`, "the chat is gone from the page")
		_, err := stack.Store.GetSession(ctx, expense)
		require.ErrorIs(t, err, store.ErrNotFound)
		status, _ = get(t, stack.URL+"/s/"+tok)
		assert.Equal(t, http.StatusNotFound, status, "its share link is revoked")
		_, err = stack.Store.GetSession(ctx, leave)
		require.NoError(t, err, "the other chat stays")
	})

	stops := tabThrough(t, tb, 40)
	requireReachable(t, stops, "input#chat-search")
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return res.StatusCode, b.String()
}

func itoa(n uint64) string { return jsonNumber(n) }

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// seedSearchableChats stores two chats for the chat tests: "年假有几天" and "报销流程", the second
// saying something the first does not ("差旅发票要原件吗？") and shared (its token returned).
func seedSearchableChats(t *testing.T, stack *browserStack) (leave, expense, shareToken string) {
	t.Helper()
	leave = seedChat(t, stack, "年假有几天", 2)
	expense = seedChat(t, stack, "报销流程", 2)
	ctx := context.Background()
	_, err := stack.Store.AppendMessage(ctx, store.Message{SessionID: expense, Role: store.RoleUser, Content: "差旅发票要原件吗？"})
	require.NoError(t, err)
	shareToken, _, err = stack.Store.CreateShare(ctx, expense, stack.User.ID, 1<<40)
	require.NoError(t, err)
	return leave, expense, shareToken
}

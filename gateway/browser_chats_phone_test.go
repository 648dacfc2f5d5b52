package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// fetchInPage downloads url with the page's own fetch (its session cookie) and returns the
// status, the content type and the body.
func fetchInPage(t *testing.T, tb *tab, url string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`fetch(`+jsString(url)+`).then(async (r) => ({status: r.status, type: r.headers.get('content-type') || '', body: await r.text()}))`, chromedp.EvalAwaitPromise))
	require.NoError(t, err, "fetch %s", url)
	var out struct {
		Status int    `json:"status"`
		Type   string `json:"type"`
		Body   string `json:"body"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	return out.Status, out.Type, out.Body
}

// TestBrowserChatsPhone: search, rename, export and delete on a 375 px phone in dark mode, the
// chat list reached through the drawer. The search results and the delete confirmation pass the
// accessibility audit; both export links are downloaded in the page and their contents checked
// (every JSONL line parses, the Markdown lists the sources); deleting revokes the share link.
func TestBrowserChatsPhone(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	leave, expense, tok := seedSearchableChats(t, stack)
	ctx := context.Background()
	br := newBrowser(t)
	tb := loginTab(t, stack, br)
	tb.setLayout(t, phoneDark)
	tb.do(t, 15*time.Second, chromedp.Navigate(stack.URL+"/#s="+leave))
	waitConnected(t, tb)
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#messages .msg').length === 2`, "chat opens")

	const drawerShown = `getComputedStyle(document.getElementById('sidebar')).visibility === 'visible' && document.getElementById('sidebar').getBoundingClientRect().left >= 0`
	const drawerHidden = `getComputedStyle(document.getElementById('sidebar')).visibility === 'hidden' && document.getElementById('sidebar').getBoundingClientRect().right <= 0`
	openDrawer := func(t *testing.T) {
		t.Helper()
		waitJS(t, tb, 15*time.Second, drawerHidden, "the drawer is closed")
		tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#menu-btn")))
		waitJS(t, tb, 15*time.Second, drawerShown, "the drawer opens")
	}

	t.Run("search", func(t *testing.T) {
		openDrawer(t)
		tabTo(t, tb, "#chat-search", false, 14)
		tb.do(t, 15*time.Second, chromedp.KeyEvent("差旅发票"))
		waitJS(t, tb, 15*time.Second, `!document.getElementById('search-results').hidden && document.querySelectorAll('#search-results a.snippet').length === 1`, "one matching message")
		fits := evalJS[bool](t, tb, `[...document.querySelectorAll('#search-results a')].every((a) => { const r = a.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth + 1; })`)
		assert.True(t, fits, "the results fit the drawer")
		assert.Empty(t, smallTargets(t, tb, `#drawer-close, #new-chat, #chat-search, #search-results a`, touchTarget), "the drawer's search and its results are touch-sized")
		assert.Empty(t, smallTargets(t, tb, `#shares-btn, .me-lang .lang-opt, .me form button`, touchTarget), "the account box's controls are touch-sized")
		auditA11y(t, tb, "search results phone-dark")
		screenshot(t, tb, "search-results-phone-dark")
		// The keyboard reaches the result; Enter opens the chat at the message and closes the drawer.
		tabTo(t, tb, "#search-results a.snippet", false, 6)
		press(t, tb, "\r")
		waitJS(t, tb, 30*time.Second, `citegate.state.current === `+jsString(expense)+` && document.activeElement && document.activeElement.matches('.msg.user') && document.activeElement.textContent.includes('差旅发票')`, "the result opens its chat at the message")
		waitJS(t, tb, 15*time.Second, drawerHidden, "picking a result closes the drawer")
		// Escape in the search field clears it (the drawer stays), a second Escape closes the drawer.
		openDrawer(t)
		tabTo(t, tb, "#chat-search", false, 14)
		press(t, tb, kb.Escape)
		waitJS(t, tb, 15*time.Second, `document.getElementById('chat-search').value === '' && !document.getElementById('sessions').hidden && document.getElementById('search-results').hidden`, "Escape clears the search")
		require.True(t, evalJS[bool](t, tb, drawerShown), "the first Escape leaves the drawer open")
		press(t, tb, kb.Escape)
		waitJS(t, tb, 15*time.Second, drawerHidden, "the second Escape closes the drawer")
	})

	menu := func(t *testing.T) {
		t.Helper()
		waitJS(t, tb, 30*time.Second, `citegate.state.current === `+jsString(expense)+` && document.querySelectorAll('#messages .msg').length > 0 && !document.querySelector('#messages p.empty')`, "the chat is open")
		click(t, tb, `.chat-menu summary`)
		waitJS(t, tb, 15*time.Second, `(() => { const r = document.querySelector('.chat-menu-body').getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth + 1; })()`, "the menu fits the phone")
	}

	t.Run("rename", func(t *testing.T) {
		menu(t)
		click(t, tb, `.chat-menu .rename`)
		waitJS(t, tb, 15*time.Second, `document.activeElement && document.activeElement.matches('#rename-form input')`, "title field focused")
		evalJS[bool](t, tb, `(document.activeElement.select(), true)`)
		tb.do(t, 15*time.Second, chromedp.KeyEvent("差旅报销"))
		press(t, tb, "\r")
		waitJS(t, tb, 15*time.Second, `document.getElementById('chat-title').textContent === '差旅报销' && [...document.querySelectorAll('#sessions a')].some((a) => a.textContent === '差旅报销')`, "renamed everywhere")
		s, err := stack.Store.GetSession(ctx, expense)
		require.NoError(t, err)
		assert.Equal(t, "差旅报销", s.Title)
	})

	t.Run("export", func(t *testing.T) {
		menu(t)
		md := evalJS[string](t, tb, `document.querySelector('.chat-menu .export-md').href`)
		jsonl := evalJS[string](t, tb, `document.querySelector('.chat-menu .export-jsonl').href`)
		kbURL := stack.URL + "/kb/"

		status, ctype, body := fetchInPage(t, tb, jsonl)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, ctype, "json")
		lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
		require.Len(t, lines, 3, "one line per message: %q", body)
		var roles []string
		for i, line := range lines {
			var m struct {
				ID        uint64          `json:"id"`
				SessionID string          `json:"sessionId"`
				Role      string          `json:"role"`
				Content   string          `json:"content"`
				Metadata  json.RawMessage `json:"metadata"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &m), "JSONL line %d parses: %s", i+1, line)
			assert.Equal(t, expense, m.SessionID)
			assert.NotZero(t, m.ID)
			roles = append(roles, m.Role)
			if i == 1 {
				assert.Contains(t, m.Content, "年假天数按工龄计算[^1^]", "the record keeps the model's text")
				assert.Contains(t, string(m.Metadata), kbURL+"annual-leave", "and its citations")
			}
		}
		assert.Equal(t, []string{"USER", "ASSISTANT", "USER"}, roles)
		assert.Contains(t, lines[2], "差旅发票要原件吗？")

		status, ctype, body = fetchInPage(t, tb, md)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, ctype, "markdown")
		assert.True(t, strings.HasPrefix(body, "# 差旅报销\n"), body)
		assert.Contains(t, body, "年假天数按工龄计算¹；申请需提前三天在系统提交²")
		assert.Contains(t, body, "**来源**\n\n1. [年假规定](<"+kbURL+"annual-leave>)\n2. [费用报销](<"+kbURL+"expense-reimbursement>)\n")
		assert.Contains(t, body, "差旅发票要原件吗？")
		assert.NotContains(t, body, "[^")
		tb.do(t, 15*time.Second, chromedp.KeyEvent(kb.Escape))
	})

	t.Run("delete", func(t *testing.T) {
		status, _ := get(t, stack.URL+"/s/"+tok)
		require.Equal(t, http.StatusOK, status)
		// A tap on 删除对话 that lands before the menu's toggle event (input runs ahead of other
		// tasks on a busy phone) still gets the confirmation.
		ctx2, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
		defer cancel()
		quick, err := chromedp.Run(ctx2, chromedp.Evaluate[bool](`(async () => {
			const m = document.querySelector('.chat-menu');
			const toggled = new Promise((r) => m.addEventListener('toggle', r, {once: true}));
			m.querySelector('summary').click();
			m.querySelector('.delete').click();
			await toggled;
			return !m.querySelector('.delete-confirm').hidden && document.activeElement.matches('.delete-no');
		})()`, chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		assert.True(t, quick, "the confirmation stays when the tap comes before the menu's toggle event")
		// ⋯ tapped twice in a row closes and opens the menu before the closing toggle event runs
		// (toggle events coalesce into one with open = true): the menu opens afresh, with 删除对话
		// and no confirmation left over (before, the next click on 删除对话 waited for a hidden button).
		fresh, err := chromedp.Run(ctx2, chromedp.Evaluate[bool](`(async () => {
			const m = document.querySelector('.chat-menu');
			const s = m.querySelector('summary');
			const toggled = new Promise((r) => m.addEventListener('toggle', r, {once: true}));
			s.click();
			s.click();
			await toggled;
			// A tap would have focused ⋯; the confirmation that held the focus is hidden now.
			s.focus();
			return m.open && !m.querySelector('.delete').hidden && m.querySelector('.delete-confirm').hidden;
		})()`, chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		assert.True(t, fresh, "a menu closed and opened again shows 删除对话, not the old confirmation")
		press(t, tb, kb.Escape)
		waitJS(t, tb, 15*time.Second, `!document.querySelector('.chat-menu').open`, "Escape closes the menu")
		menu(t)
		click(t, tb, `.chat-menu .delete`)
		waitJS(t, tb, 15*time.Second, `!document.querySelector('.delete-confirm').hidden && document.activeElement && document.activeElement.matches('.delete-no')`, "confirmation asked, Cancel focused")
		fits := evalJS[bool](t, tb, `[...document.querySelectorAll('.delete-confirm button')].every((b) => { const r = b.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth + 1 && r.bottom <= innerHeight; })`)
		assert.True(t, fits, "both answers are on screen")
		assert.Empty(t, smallTargets(t, tb, `#menu-btn, #share-btn, .chat-menu summary, .menu-item, .delete-confirm button, #send`, touchTarget), "the header, the menu and the confirmation are touch-sized")
		auditA11y(t, tb, "delete confirmation phone-dark")
		screenshot(t, tb, "delete-confirm-phone-dark")
		tabTo(t, tb, ".delete-yes", true, 3)
		press(t, tb, "\r")
		waitJS(t, tb, 15*time.Second, `citegate.state.current === null && ![...document.querySelectorAll('#sessions a')].some((a) => a.dataset.id === `+jsString(expense)+`)`, "the chat is gone from the page")
		_, err = stack.Store.GetSession(ctx, expense)
		require.ErrorIs(t, err, store.ErrNotFound)
		status, _ = get(t, stack.URL+"/s/"+tok)
		assert.Equal(t, http.StatusNotFound, status, "its share link is revoked")
		_, err = stack.Store.GetSession(ctx, leave)
		require.NoError(t, err, "the other chat stays")
		openDrawer(t)
		assert.Equal(t, []string{leave}, evalJS[[]string](t, tb, `[...document.querySelectorAll('#sessions a')].map((a) => a.dataset.id)`), "the drawer lists the remaining chat")
		press(t, tb, kb.Escape)
	})
	tb.setLayout(t, desktopLight)
}

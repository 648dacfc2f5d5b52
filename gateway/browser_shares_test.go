package gateway_test

import (
	"context"
	"io"
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

// sharedLink is the part of a GET /api/shares entry the browser tests read.
type sharedLink struct {
	Token     string `json:"token"`
	ID        string `json:"id"`
	URL       string `json:"url"`
	Watermark uint64 `json:"watermark"`
	Messages  int    `json:"messages"`
	Views     uint64 `json:"views"`
}

func viewShare(t *testing.T, url string, times int) {
	t.Helper()
	for range times {
		res, err := http.Get(url)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
	}
}

func listShared(t *testing.T, stack *browserStack) []sharedLink {
	t.Helper()
	var out struct {
		Shares []sharedLink `json:"shares"`
	}
	require.Equal(t, http.StatusOK, stack.api(t, http.MethodGet, "/api/shares", &out))
	return out.Shares
}

// TestBrowserSharedLinks: the "Shared links" view at 375 px (from the drawer) and 1280 px, light
// and dark: each link with its chat, creation time, what it covers, views and last view, copy and
// open; revoke asks first, then the link leaves the list and its page 404s; the empty state; the
// keyboard reaches every action; axe finds nothing serious.
func TestBrowserSharedLinks(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	leave := seedChat(t, stack, "年假怎么算", 6)
	travel := seedChat(t, stack, "差旅报销流程", 4)
	var a, b sharedLink
	require.Equal(t, http.StatusCreated, stack.api(t, http.MethodPost, "/api/sessions/"+leave+"/shares", &a))
	require.Equal(t, http.StatusCreated, stack.api(t, http.MethodPost, "/api/sessions/"+travel+"/shares", &b))
	viewShare(t, a.URL, 3)

	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	openView := func(t *testing.T, l layout) {
		t.Helper()
		if l.Mobile {
			// Click only once the drawer has stopped moving, or the click lands beside the button.
			waitJS(t, tb, 30*time.Second, `getComputedStyle(document.getElementById('sidebar')).visibility === 'hidden'`, "drawer closed")
			tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS("#menu-btn")))
			waitJS(t, tb, 30*time.Second, `document.body.classList.contains('drawer-open') && getComputedStyle(document.getElementById('sidebar')).visibility === 'visible' && document.getElementById('sidebar').getBoundingClientRect().left >= 0`, "drawer open")
		}
		tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS("#shares-btn")))
		waitJS(t, tb, 30*time.Second, `document.getElementById('shares-view').open && document.querySelectorAll('#share-list li.share-item').length === 2`, "shared links listed")
	}
	closeView := func(t *testing.T) {
		t.Helper()
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\x1b"))
		waitJS(t, tb, 15*time.Second, `!document.getElementById('shares-view').open`, "view closes on Esc")
	}

	eachLayout(t, tb, func(t *testing.T, l layout) {
		openView(t, l)
		items := evalJS[[]string](t, tb, `[...document.querySelectorAll('#share-list li.share-item')].map((li) => li.innerText.replace(/\s+/g, ' '))`)
		require.Len(t, items, 2)
		// Newest first: the travel chat was shared last.
		assert.Contains(t, items[0], "差旅报销流程")
		assert.Contains(t, items[0], "还没有人查看")
		assert.Contains(t, items[0], "包含 4 条消息")
		assert.Contains(t, items[1], "年假怎么算")
		assert.Contains(t, items[1], "包含 6 条消息")
		assert.Contains(t, items[1], "3 次查看")
		assert.Contains(t, items[1], "最近查看")
		assert.Contains(t, items[1], "创建于")
		assert.Equal(t, a.URL, evalJS[string](t, tb, `document.querySelector('#share-list li[data-id="`+a.ID+`"] input.share-link').value`))
		assert.Equal(t, a.URL, evalJS[string](t, tb, `document.querySelector('#share-list li[data-id="`+a.ID+`"] a.share-open').href`))
		assert.LessOrEqual(t, evalJS[float64](t, tb, `document.getElementById('shares-view').scrollWidth`), float64(l.Width), "no horizontal scroll")
		auditA11y(t, tb, "shared links "+l.Name)
		name := "shared-links-" + l.Name
		if l.Name == "desktop-light" || l.Name == "phone-dark" {
			shot(t, tb, name)
		} else {
			screenshot(t, tb, name)
		}
		if !l.Mobile {
			// The keyboard reaches every action and stays inside the dialog.
			stops := tabThrough(t, tb, 20)
			requireReachable(t, stops, "#shares-close", "input.share-link", "button.share-copy", "a.share-open", "button.share-revoke")
			for _, s := range stops {
				assert.NotContains(t, s.Desc, "#input", "focus stays in the dialog")
			}
		}
		closeView(t)
		// The dialog's close event (which puts focus back) is dispatched after close() returns.
		if l.Mobile {
			waitJS(t, tb, 15*time.Second, `document.activeElement.id === 'menu-btn'`, "focus returns to the menu button")
		} else {
			waitJS(t, tb, 15*time.Second, `document.activeElement.id === 'shares-btn'`, "focus returns to the opener")
		}
	})

	// Revoke: asks first; cancel keeps the link; confirm removes it and its page 404s.
	openView(t, desktopLight)
	item := `#share-list li[data-id="` + a.ID + `"]`
	tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS(item+" button.share-revoke")))
	waitJS(t, tb, 15*time.Second, `!document.querySelector('`+item+` .share-confirm').hidden`, "confirmation shows")
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('`+item+` .share-confirm').innerText`), "确定撤销吗")
	auditA11y(t, tb, "revoke confirmation")
	tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS(item+" button.share-revoke-no")))
	assert.Len(t, listShared(t, stack), 2, "cancel revokes nothing")
	tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS(item+" button.share-revoke")))
	tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS(item+" button.share-revoke-yes")))
	waitJS(t, tb, 30*time.Second, `!document.querySelector('`+item+`')`, "the revoked link leaves the list")
	res, err := http.Get(a.URL)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode, "the revoked link's page is gone")
	require.Len(t, listShared(t, stack), 1)
	// The last one: then the empty state.
	item = `#share-list li[data-id="` + b.ID + `"]`
	tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS(item+" button.share-revoke")))
	tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS(item+" button.share-revoke-yes")))
	waitJS(t, tb, 30*time.Second, `document.querySelectorAll('#share-list li').length === 0 && document.querySelector('.shares-status.shares-empty') && !document.querySelector('.shares-status').hidden`, "empty state")
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('.shares-status').innerText`), "你还没有分享过对话")
	eachLayout(t, tb, func(t *testing.T, l layout) { auditA11y(t, tb, "shared links, empty, "+l.Name) })
	closeView(t)
}

// TestBrowserExistingLinkOffer: sharing a chat that has a live link shows that link with what it
// covers; once the chat has grown, the box offers "update" and "keep": keep changes nothing,
// update moves the same link forward (its page then shows the newer messages).
func TestBrowserExistingLinkOffer(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	ctx := context.Background()
	sid := seedChat(t, stack, "年假怎么算", 4)
	var first sharedLink
	require.Equal(t, http.StatusCreated, stack.api(t, http.MethodPost, "/api/sessions/"+sid+"/shares", &first))

	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.do(t, 15*time.Second, chromedp.Navigate(stack.URL+"/#s="+sid), chromedp.WaitVisible(chromedp.CSS(".msg.assistant")))
	waitConnected(t, tb)
	clickShare := func() {
		t.Helper()
		tb.do(t, 30*time.Second, chromedp.Click(chromedp.CSS("#share-btn")))
		waitJS(t, tb, 30*time.Second, `!document.getElementById('share-box').hidden && document.getElementById('share-url').value !== '' && document.getElementById('share-info').textContent !== ''`, "share box shows")
	}
	// Nothing newer: the same link, what it covers, no offer.
	clickShare()
	assert.Equal(t, first.URL, evalJS[string](t, tb, `document.getElementById('share-url').value`), "the existing link, not a new one")
	assert.Contains(t, evalJS[string](t, tb, `document.getElementById('share-info').textContent`), "此链接包含 4 条消息")
	assert.True(t, evalJS[bool](t, tb, `document.getElementById('share-offer').hidden`))
	tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#share-close")))

	// The chat grows.
	for _, m := range []store.Message{{Role: store.RoleUser, Content: "后来的追问XYZ"}, {Role: store.RoleAssistant, Content: "后来的回答"}} {
		m.SessionID = sid
		_, err := stack.Store.AppendMessage(ctx, m)
		require.NoError(t, err)
	}
	eachLayout(t, tb, func(t *testing.T, l layout) {
		clickShare()
		waitJS(t, tb, 15*time.Second, `!document.getElementById('share-offer').hidden`, "the offer shows")
		offer := evalJS[string](t, tb, `document.getElementById('share-offer').innerText`)
		assert.Contains(t, offer, "更新链接，包含新消息")
		assert.Contains(t, offer, "保持原样")
		assert.Equal(t, "share-update", evalJS[string](t, tb, `document.activeElement.className.split(' ').pop()`), "focus on the offer")
		auditA11y(t, tb, "existing link offer "+l.Name)
		if l.Name == "desktop-light" {
			shot(t, tb, "share-offer-desktop-light")
		} else {
			screenshot(t, tb, "share-offer-"+l.Name)
		}
		// Keep: nothing changes.
		tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#share-offer button.share-keep")))
		waitJS(t, tb, 15*time.Second, `document.getElementById('share-offer').hidden`, "keep closes the offer")
		tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#share-close")))
	})
	list := listShared(t, stack)
	require.Len(t, list, 1)
	assert.Equal(t, first.Watermark, list[0].Watermark, "keep changes nothing")

	// Update: the same link now covers the newer messages.
	clickShare()
	tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#share-offer button.share-update")))
	waitJS(t, tb, 30*time.Second, `document.getElementById('share-offer').hidden && document.getElementById('share-info').textContent.includes('链接已更新')`, "updated")
	assert.Contains(t, evalJS[string](t, tb, `document.getElementById('share-info').textContent`), "6 条消息")
	assert.Equal(t, first.URL, evalJS[string](t, tb, `document.getElementById('share-url').value`), "the same link")
	list = listShared(t, stack)
	require.Len(t, list, 1)
	assert.Equal(t, first.Token, list[0].Token)
	assert.Greater(t, list[0].Watermark, first.Watermark)
	res, err := http.Get(first.URL)
	require.NoError(t, err)
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.True(t, strings.Contains(string(page), "后来的追问XYZ"), "the link shows the newer messages")
	// Again: nothing newer now, so no offer.
	tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#share-close")))
	clickShare()
	assert.True(t, evalJS[bool](t, tb, `document.getElementById('share-offer').hidden`))
}

// TestBrowserSharesKeyboardPhoneDark: at 375 px in dark mode, with the keyboard only (Tab,
// Shift+Tab, Enter, Esc) and a visible focus at every step: the share box of a chat that grew
// offers "update link" and Enter moves the same link forward; the shared-links view (from the
// drawer) asks before revoking, "no" keeps the link, "yes" removes it and its page 404s. The
// accessibility audit runs on the offer and on the revoke confirmation.
func TestBrowserSharesKeyboardPhoneDark(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	ctx := context.Background()
	leave := seedChat(t, stack, "年假怎么算", 4)
	travel := seedChat(t, stack, "差旅报销流程", 2)
	var a, b sharedLink
	require.Equal(t, http.StatusCreated, stack.api(t, http.MethodPost, "/api/sessions/"+leave+"/shares", &a))
	require.Equal(t, http.StatusCreated, stack.api(t, http.MethodPost, "/api/sessions/"+travel+"/shares", &b))
	for _, m := range []store.Message{{Role: store.RoleUser, Content: "后来的追问XYZ"}, {Role: store.RoleAssistant, Content: "后来的回答"}} {
		m.SessionID = leave
		_, err := stack.Store.AppendMessage(ctx, m)
		require.NoError(t, err)
	}

	browser := newBrowser(t)
	tb := loginTab(t, stack, browser)
	tb.setLayout(t, phoneDark)
	tb.do(t, 15*time.Second, chromedp.Navigate(stack.URL+"/#s="+leave), chromedp.WaitVisible(chromedp.CSS(".msg.assistant")))
	waitConnected(t, tb)
	tb.setLayout(t, phoneDark)
	enter := func() { t.Helper(); tb.do(t, 15*time.Second, chromedp.KeyEvent("\r")) }
	shiftTab := func() {
		t.Helper()
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
	}

	// Update: Share, then Enter on the offer (it has the focus).
	tabUntil(t, tb, "#share-btn", 60)
	enter()
	waitJS(t, tb, 15*time.Second, `!document.getElementById('share-box').hidden && !document.getElementById('share-offer').hidden && document.activeElement.matches('#share-offer button.share-update')`, "the offer shows with the focus on update")
	requireFocusShown(t, tb, "button.share-update")
	assert.Contains(t, evalJS[string](t, tb, `document.getElementById('share-offer').innerText`), "更新链接，包含新消息")
	assert.LessOrEqual(t, evalJS[float64](t, tb, `document.documentElement.scrollWidth`), 375.0, "no horizontal scroll")
	auditA11y(t, tb, "existing link offer phone-dark (keyboard)")
	screenshot(t, tb, "share-offer-keyboard-phone-dark")
	enter()
	waitJS(t, tb, 15*time.Second, `document.getElementById('share-offer').hidden && document.getElementById('share-info').textContent.includes('链接已更新') && document.activeElement.id === 'share-url'`, "updated, focus on the link")
	requireFocusShown(t, tb, "#share-url")
	assert.Contains(t, evalJS[string](t, tb, `document.getElementById('share-info').textContent`), "6 条消息")
	assert.Equal(t, a.URL, evalJS[string](t, tb, `document.getElementById('share-url').value`), "the same link")
	for _, s := range listShared(t, stack) {
		if s.ID == a.ID {
			assert.Greater(t, s.Watermark, a.Watermark, "the link moved forward")
			assert.Equal(t, 6, s.Messages)
		}
	}
	tb.do(t, 15*time.Second, chromedp.KeyEvent(kb.Escape))
	waitJS(t, tb, 15*time.Second, `document.getElementById('share-box').hidden && document.activeElement.id === 'share-btn'`, "Esc closes the box, focus back on Share")

	// Revoke: ☰, then "shared links" inside the drawer, then the link's revoke button.
	shiftTabOnUntil(t, tb, "#menu-btn", 10)
	enter()
	waitJS(t, tb, 15*time.Second, `document.body.classList.contains('drawer-open') && getComputedStyle(document.getElementById('sidebar')).visibility === 'visible' && document.getElementById('sidebar').getBoundingClientRect().left >= 0 && document.getElementById('sidebar').contains(document.activeElement)`, "the drawer opens with the focus inside")
	tabOnUntil(t, tb, "#shares-btn", 30)
	enter()
	waitJS(t, tb, 15*time.Second, `document.getElementById('shares-view').open && document.querySelectorAll('#share-list li.share-item').length === 2`, "shared links listed")
	item := `#share-list li[data-id="` + a.ID + `"]`
	tabOnUntil(t, tb, item+" button.share-revoke", 30)
	enter()
	waitJS(t, tb, 15*time.Second, `!document.querySelector('`+item+` .share-confirm').hidden && document.activeElement.matches('`+item+` button.share-revoke-no')`, "the confirmation shows, focus on no")
	requireFocusShown(t, tb, "button.share-revoke-no")
	assert.Contains(t, evalJS[string](t, tb, `document.querySelector('`+item+` .share-confirm').innerText`), "确定撤销吗")
	assert.LessOrEqual(t, evalJS[float64](t, tb, `document.getElementById('shares-view').scrollWidth`), 375.0, "no horizontal scroll")
	auditA11y(t, tb, "revoke confirmation phone-dark")
	screenshot(t, tb, "revoke-confirm-phone-dark")
	enter()
	waitJS(t, tb, 15*time.Second, `document.querySelector('`+item+` .share-confirm').hidden && document.activeElement.matches('`+item+` button.share-revoke')`, "no: back to revoke")
	requireFocusShown(t, tb, "button.share-revoke")
	assert.Len(t, listShared(t, stack), 2, "no revokes nothing")
	enter()
	waitJS(t, tb, 15*time.Second, `document.activeElement.matches('`+item+` button.share-revoke-no')`, "asks again")
	shiftTab()
	requireFocusShown(t, tb, item+" button.share-revoke-yes")
	enter()
	waitJS(t, tb, 15*time.Second, `!document.querySelector('`+item+`') && document.getElementById('shares-view').contains(document.activeElement) && document.activeElement !== document.body`, "the revoked link leaves the list, focus stays in the view")
	requireFocusShown(t, tb, `#share-list li[data-id="`+b.ID+`"] button.share-copy`)
	res, err := http.Get(a.URL)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode, "the revoked link's page is gone")
	list := listShared(t, stack)
	require.Len(t, list, 1)
	assert.Equal(t, b.ID, list[0].ID)
	tb.do(t, 15*time.Second, chromedp.KeyEvent(kb.Escape))
	waitJS(t, tb, 15*time.Second, `!document.getElementById('shares-view').open && document.activeElement.id === 'menu-btn'`, "Esc closes the view, focus on ☰")
}

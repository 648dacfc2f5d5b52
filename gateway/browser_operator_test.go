package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// operatorSeed is what TestBrowserOperatorConsole reviews: alice's shared chat (one answer with a
// dropped marker, a hidden link and a thumbs-up), a question added after sharing, and a chat nobody
// shared.
type operatorSeed struct {
	shareID, shareToken string
	answerID            uint64
}

const (
	browserSecretLater    = "LATER-THAN-THE-SHARE"
	browserSecretUnshared = "NEVER-SHARED-CHAT"
)

// committedShots are the console screenshots kept in docs/screenshots/ (the README shows them); the
// other layouts go to the temporary screenshot directory only.
var committedShots = map[string]bool{
	"operator-console-desktop-light": true, "operator-share-phone-dark": true, "operator-audit-desktop-light": true,
}

func seedOperatorReview(t *testing.T, stack *browserStack) operatorSeed {
	t.Helper()
	ctx := context.Background()
	st := stack.Store
	alice, _, err := st.CreateUser(ctx, "alice")
	require.NoError(t, err)
	sess, err := st.CreateSession(ctx, store.Session{UserID: alice.ID, Channel: "desktop", Title: "年假怎么算"})
	require.NoError(t, err)
	q, err := st.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "年假有几天？"})
	require.NoError(t, err)
	run, err := st.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: q.ID})
	require.NoError(t, err)
	kb := stack.URL + "/kb/"
	meta := json.RawMessage(`{"citations":[{"n":1,"url":"` + kb + `annual-leave","title":"年假规定"}],` +
		`"links":{"hidden":1,"allowed":[]},"feedback":{"vote":"up","comment":"清楚"}}`)
	_, final, err := st.ConcludeRun(ctx, store.Conclusion{
		RunID: run.ID, Phase: store.PhaseCompleted,
		Final: &store.Message{SessionID: sess.ID, RunID: run.ID, Role: store.RoleAssistant, Metadata: meta,
			Content: "年假按工龄计算，满一年 5 天[^1^]。详见 〔链接未经核实，已隐藏〕。"},
		MarkersSeen: 2, MarkersKept: 1, MarkersDropped: 1,
	})
	require.NoError(t, err)
	tok, sh, err := st.CreateShare(ctx, sess.ID, alice.ID, final.ID)
	require.NoError(t, err)
	_, err = st.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: browserSecretLater})
	require.NoError(t, err)
	other, err := st.CreateSession(ctx, store.Session{UserID: alice.ID, Channel: "desktop", Title: browserSecretUnshared})
	require.NoError(t, err)
	_, err = st.AppendMessage(ctx, store.Message{SessionID: other.ID, Role: store.RoleUser, Content: browserSecretUnshared})
	require.NoError(t, err)
	return operatorSeed{shareID: sh.TokenHash, shareToken: tok, answerID: final.ID}
}

// TestBrowserOperatorConsole drives the console in Chromium with JavaScript off (sign in, list,
// filter, open a share at its answer, revoke it, read the audit log), and checks each screen in a
// second, script-enabled tab (axe-core runs inside the page) at 375 and 1280 px, light and dark:
// no serious accessibility violation, no page-wide horizontal scroll, keyboard reach.
func TestBrowserOperatorConsole(t *testing.T) {
	requireBrowser(t)
	stack := newBrowserStack(t, nil)
	seed := seedOperatorReview(t, stack)
	ctx := context.Background()
	answer := strconv.FormatUint(seed.answerID, 10)

	browser := newBrowser(t)
	nojs := newTab(t, browser, true) // the console needs no script

	// Before the role, /operator is the not-found page.
	nojs.do(t, 30*time.Second,
		chromedp.Navigate(stack.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SetValue(chromedp.CSS("#token"), stack.Token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitReady(chromedp.CSS("body.app")),
		chromedp.Navigate(stack.URL+"/operator"),
		chromedp.WaitReady(chromedp.CSS("body")),
	)
	assert.Contains(t, evalJS[string](t, nojs, `document.title`), "页面不存在", "not an operator yet")
	_, _, err := stack.Store.SetOperator(ctx, "browser", true, store.Actor{Name: "cli:test"})
	require.NoError(t, err)

	nojs.do(t, 15*time.Second, chromedp.Navigate(stack.URL+"/operator"), chromedp.WaitVisible(chromedp.CSS("tr[data-share]")))
	row := `tr[data-share="` + seed.shareID + `"]`
	cells := evalJS[[]string](t, nojs, `[...document.querySelectorAll('`+row+` td')].map((td) => td.innerText.replace(/\s+/g, ' ').trim())`)
	require.Len(t, cells, 8)
	assert.Equal(t, "年假怎么算", cells[0])
	assert.Equal(t, "alice", cells[1])
	assert.Equal(t, "2", cells[3], "the question and its answer; nothing past the watermark")
	assert.Equal(t, "1 / 1", cells[4])
	assert.Equal(t, "1", cells[5])
	assert.Equal(t, "1 / 0", cells[6])
	page := evalJS[string](t, nojs, `document.documentElement.outerHTML`)
	assert.NotContains(t, page, browserSecretLater)
	assert.NotContains(t, page, browserSecretUnshared)
	assert.NotContains(t, page, seed.shareToken)

	// The filter lists the answer; its link opens the share at that answer.
	nojs.do(t, 15*time.Second,
		chromedp.Click(chromedp.CSS(`#op-tab-dropped`)),
		chromedp.WaitVisible(chromedp.CSS(`a.op-answer[href*="#msg-`+answer+`"]`)),
	)
	assert.Equal(t, "page", evalJS[string](t, nojs, `document.getElementById('op-tab-dropped').getAttribute('aria-current')`))
	nojs.do(t, 15*time.Second,
		chromedp.Click(chromedp.CSS(`a.op-answer`)),
		chromedp.WaitVisible(chromedp.CSS("#msg-"+answer)),
	)
	assert.True(t, strings.HasSuffix(evalJS[string](t, nojs, `location.href`), "/operator/shares/"+seed.shareID+"#msg-"+answer))
	assert.Equal(t, "msg-"+answer, evalJS[string](t, nojs, `document.querySelector(':target') ? document.querySelector(':target').id : ''`))
	view := evalJS[string](t, nojs, `document.querySelector('main').innerText`)
	assert.Contains(t, view, "年假按工龄计算")
	assert.Contains(t, view, "引用 保留 1 / 丢弃 1")
	assert.NotContains(t, view, browserSecretLater)
	assert.Equal(t, 1, evalJS[int](t, nojs, `document.querySelectorAll('.msg.assistant sup.cite-ref').length`), "the share page's superscripts")
	assert.Equal(t, stack.URL+"/kb/annual-leave", evalJS[string](t, nojs, `document.querySelector('.msg.assistant details.sources a').href`))

	// Every screen at every layout, in a tab with scripts on (for the audit).
	tb := loginTab(t, stack, browser)
	checkScreen := func(path, name, ready string) {
		t.Helper()
		tb.do(t, 15*time.Second, chromedp.Navigate(stack.URL+path), chromedp.WaitVisible(chromedp.CSS(ready)))
		eachLayout(t, tb, func(t *testing.T, l layout) {
			auditA11y(t, tb, name+" "+l.Name)
			assert.LessOrEqual(t, evalJS[float64](t, tb, `document.documentElement.scrollWidth`), float64(l.Width),
				"%s: no page-wide horizontal scroll (tables scroll in their own region)", name)
			if committedShots[name+"-"+l.Name] {
				shot(t, tb, name+"-"+l.Name)
			} else {
				screenshot(t, tb, name+"-"+l.Name)
			}
		})
	}
	checkScreen("/operator", "operator-console", "tr[data-share]")
	requireReachable(t, tabThrough(t, tb, 30), "a.op-home", "#op-tab-shares", "#op-tab-dropped", "#op-tab-hidden", "#op-tab-audit",
		"div.op-table", "a.op-chat", "a.op-open", "button.op-danger")
	checkScreen("/operator?filter=dropped", "operator-dropped", "a.op-answer")
	checkScreen("/operator/shares/"+seed.shareID, "operator-share", ".msg.assistant")
	requireReachable(t, tabThrough(t, tb, 30), "a.op-back", "button.op-danger")

	// Revoke from the view: a real form post from our own page passes the origin check.
	nojs.do(t, 15*time.Second,
		chromedp.Click(chromedp.CSS(".op-bar button.op-danger")),
		chromedp.WaitVisible(chromedp.CSS(".op-notice")),
	)
	assert.True(t, strings.HasSuffix(evalJS[string](t, nojs, `location.href`), "/operator?done=revoked"))
	assert.Equal(t, 0, evalJS[int](t, nojs, `document.querySelectorAll('tr[data-share]').length`))
	res, err := http.Get(stack.URL + "/s/" + seed.shareToken)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode, "the owner's link no longer opens")

	// The audit log: the revocation, both views (one per tab), the role grant, newest first.
	nojs.do(t, 15*time.Second,
		chromedp.Click(chromedp.CSS(`#op-tab-audit`)),
		chromedp.WaitVisible(chromedp.CSS("tr[data-audit]")),
	)
	actions := evalJS[[]string](t, nojs, `[...document.querySelectorAll('tr[data-audit]')].map((tr) => tr.dataset.action)`)
	assert.Equal(t, []string{"share.revoke", "share.view", "share.view", "role.grant"}, actions)
	checkScreen("/operator/audit", "operator-audit", "tr[data-audit]")
	requireReachable(t, tabThrough(t, tb, 30), "a.op-export-jsonl", "a.op-export-csv")
}

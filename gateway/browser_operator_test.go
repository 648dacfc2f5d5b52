package gateway_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
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

	// The filters and the export, used as an operator would, at 1280 px light and 375 px dark: bob's
	// shared chat has an answer with dropped markers, one with hidden links and a clean one.
	more := seedOperatorFilters(t, stack)
	downloads := allowDownloads(t, tb)
	for _, l := range []layout{desktopLight, phoneDark} {
		t.Run("filters and export "+l.Name, func(t *testing.T) {
			tb.setLayout(t, l)
			for _, f := range []struct {
				tab, question string
				answer        uint64
				dropped       string
				hidden        string
			}{
				{"dropped", "差旅能报销几天？", more.dropped, "2", "0"},
				{"hidden", "报销网址是什么？", more.hidden, "0", "3"},
			} {
				tb.do(t, 15*time.Second, chromedp.Navigate(stack.URL+"/operator"), chromedp.WaitVisible(chromedp.CSS("tr[data-share]")))
				// A link to the filtered page: wait for an element only the new page has.
				tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("#op-tab-"+f.tab)), chromedp.WaitVisible(chromedp.CSS(`#op-tab-`+f.tab+`[aria-current="page"]`)))
				waitJS(t, tb, 15*time.Second, `!!document.querySelector('a.op-answer')`, f.tab+" filter lists answers")
				rows := evalJS[[][]string](t, tb, `[...document.querySelectorAll('.op-table tbody tr')].map((tr) => [...tr.querySelectorAll('td')].map((td) => td.innerText.trim()))`)
				require.Len(t, rows, 1, "%s: only the one answer is listed: %v", f.tab, rows)
				assert.Equal(t, f.question, rows[0][0])
				assert.Equal(t, "报销问题", rows[0][1])
				assert.Equal(t, "bob", rows[0][2])
				assert.Equal(t, f.dropped, rows[0][4], "dropped markers")
				assert.Equal(t, f.hidden, rows[0][5], "hidden links")
				assert.LessOrEqual(t, evalJS[float64](t, tb, `document.documentElement.scrollWidth`), float64(l.Width), "no page-wide horizontal scroll")
				auditA11y(t, tb, f.tab+" filter "+l.Name)
				// The answer's link opens the share at that answer.
				id := strconv.FormatUint(f.answer, 10)
				tb.do(t, 15*time.Second, chromedp.Click(chromedp.CSS("a.op-answer")), chromedp.WaitVisible(chromedp.CSS("#msg-"+id)))
				assert.Equal(t, "msg-"+id, evalJS[string](t, tb, `document.querySelector(':target') ? document.querySelector(':target').id : ''`))
			}

			// The export, downloaded from the audit tab with the keyboard: the file has the test's
			// actions and ends with its own entry.
			tb.do(t, 15*time.Second, chromedp.Navigate(stack.URL+"/operator/audit"), chromedp.WaitVisible(chromedp.CSS("tr[data-audit]")))
			for _, format := range []string{"jsonl", "csv"} {
				tabUntil(t, tb, "a.op-export-"+format, 30)
				tb.do(t, 15*time.Second, chromedp.KeyEvent("\r"))
				entries := readAuditDownload(t, downloads, format)
				var acts []string
				bobViews := 0
				for _, e := range entries {
					acts = append(acts, e.Action)
					if e.Action == "share.view" && e.Detail == `chat "报销问题" of bob` {
						bobViews++
					}
				}
				// Oldest first: the grant, the two views of alice's share and its revocation above.
				require.GreaterOrEqual(t, len(acts), 5, format)
				assert.Equal(t, []string{"role.grant", "share.view", "share.view", "share.revoke"}, acts[:4], format)
				assert.Equal(t, store.AuditEntry{Actor: "cli:test", Action: "role.grant", Target: "browser"}, entries[0], format)
				assert.Equal(t, store.AuditEntry{ActorID: stack.User.ID, Actor: "browser", Action: "share.revoke", Target: seed.shareID, Detail: `chat "年假怎么算" of alice`}, entries[3],
					"%s: the revocation, by whom, of which share", format)
				assert.GreaterOrEqual(t, bobViews, 2, "%s: this layout's two views of bob's share (one per filter)", format)
				last := entries[len(entries)-1]
				assert.Equal(t, store.AuditEntry{ActorID: stack.User.ID, Actor: "browser", Action: "audit.export", Detail: format}, last, "%s: the file ends with its own export", format)
			}
		})
	}
	tb.setLayout(t, desktopLight)
}

// operatorFilterSeed names the answers of bob's shared chat the console's filters must list.
type operatorFilterSeed struct{ dropped, hidden, clean uint64 }

// seedOperatorFilters stores bob's chat, shared: an answer whose run dropped two markers, one with
// three hidden links, and a clean one.
func seedOperatorFilters(t *testing.T, stack *browserStack) operatorFilterSeed {
	t.Helper()
	ctx := context.Background()
	st := stack.Store
	bob, _, err := st.CreateUser(ctx, "bob")
	require.NoError(t, err)
	sess, err := st.CreateSession(ctx, store.Session{UserID: bob.ID, Channel: "desktop", Title: "报销问题"})
	require.NoError(t, err)
	answer := func(question, text string, dropped, hidden int) uint64 {
		q, err := st.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: question})
		require.NoError(t, err)
		run, err := st.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: q.ID})
		require.NoError(t, err)
		meta := json.RawMessage(`{"citations":[{"n":1,"url":"` + stack.URL + `/kb/expense-reimbursement","title":"费用报销"}],"links":{"hidden":` + strconv.Itoa(hidden) + `,"allowed":[]}}`)
		_, final, err := st.ConcludeRun(ctx, store.Conclusion{
			RunID: run.ID, Phase: store.PhaseCompleted,
			Final:       &store.Message{SessionID: sess.ID, RunID: run.ID, Role: store.RoleAssistant, Metadata: meta, Content: text},
			MarkersSeen: 1 + dropped, MarkersKept: 1, MarkersDropped: dropped,
		})
		require.NoError(t, err)
		return final.ID
	}
	var s operatorFilterSeed
	s.dropped = answer("差旅能报销几天？", "出差期间按实际天数报销[^1^]。", 2, 0)
	s.hidden = answer("报销网址是什么？", "在报销系统提交[^1^]：〔链接未经核实，已隐藏〕", 0, 3)
	s.clean = answer("病假怎么请？", "病假需提交证明[^1^]。", 0, 0)
	_, _, err = st.CreateShare(ctx, sess.ID, bob.ID, s.clean)
	require.NoError(t, err)
	return s
}

// allowDownloads saves the tab's downloads into a fresh directory and returns it.
func allowDownloads(t *testing.T, tb *tab) string {
	t.Helper()
	dir := t.TempDir()
	_, err := chromedp.CallBrowser(tb.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir,
		BrowserContextID: chromedp.FromContext(tb.ctx).BrowserContextID,
	})
	require.NoError(t, err)
	return dir
}

// readAuditDownload waits for a finished citegate-audit-*.<format> download in dir (Chromium
// writes a .crdownload file and renames it when done), parses it, and removes it, so the next
// download is the only file.
func readAuditDownload(t *testing.T, dir, format string) []store.AuditEntry {
	t.Helper()
	var path string
	deadline := time.Now().Add(30 * time.Second)
	for path == "" {
		names, _ := filepath.Glob(filepath.Join(dir, "citegate-audit-*."+format))
		if len(names) == 1 {
			path = names[0]
			break
		}
		require.LessOrEqual(t, len(names), 1, "one download at a time: %v", names)
		if time.Now().After(deadline) {
			all, _ := os.ReadDir(dir)
			t.Fatalf("no %s download after 30 s (directory: %v)", format, all)
		}
		time.Sleep(50 * time.Millisecond)
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	var out []store.AuditEntry
	if format == "jsonl" {
		for _, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
			var e store.AuditEntry
			require.NoError(t, json.Unmarshal([]byte(line), &e), "a JSONL line: %q", line)
			e.ID, e.Time = 0, time.Time{}
			out = append(out, e)
		}
	} else {
		rows, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
		require.NoError(t, err, "the CSV parses")
		require.NotEmpty(t, rows)
		require.Equal(t, []string{"id", "time", "actor_id", "actor", "action", "target", "detail"}, rows[0])
		for _, r := range rows[1:] {
			_, err := strconv.ParseUint(r[0], 10, 64)
			require.NoError(t, err, "id column: %v", r)
			_, err = time.Parse(time.RFC3339Nano, r[1])
			require.NoError(t, err, "time column: %v", r)
			// Cells a spreadsheet would evaluate carry csvCell's leading apostrophe; a user id is
			// base64url and starts with "-" one time in 64.
			c := func(v string) string {
				if len(v) > 1 && v[0] == '\'' && strings.ContainsRune("=+-@\t\r", rune(v[1])) {
					return v[1:]
				}
				return v
			}
			out = append(out, store.AuditEntry{ActorID: c(r[2]), Actor: c(r[3]), Action: c(r[4]), Target: c(r[5]), Detail: c(r[6])})
		}
	}
	require.NotEmpty(t, out, "the %s export has entries", format)
	return out
}

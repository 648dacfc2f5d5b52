package gateway_test

// Helpers for the desktop issue's "done when" checks, meant to be called from any browser test:
//
//	tb := loginTab(t, stack, browser)            // a logged-in, connected tab
//	eachLayout(t, tb, func(t *testing.T, l layout) {  // 375 px and 1280 px, light and dark
//		auditA11y(t, tb, "chat "+l.Name)          // axe-core inside the page: no serious/critical violation
//	})
//	focused := tabThrough(t, tb, 60)             // keyboard order; each stop reports focus visibility
//	requireReachable(t, focused, "#new-chat", "#input")
//	sessionID := seedChat(t, stack, "title", 200) // a stored chat with answers and sources
//	shot(t, tb, "chat-desktop-light")             // docs/screenshots/ when CITEGATE_UPDATE_SCREENSHOTS=1

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// layout is one viewport and colour scheme a page must work in.
type layout struct {
	Name          string
	Width, Height int64
	Mobile, Dark  bool
}

// Phone is an iPhone-SE-class 375 px screen; desktop is the 1280 px window the suite starts with.
var (
	phoneLight   = layout{Name: "phone-light", Width: 375, Height: 740, Mobile: true}
	phoneDark    = layout{Name: "phone-dark", Width: 375, Height: 740, Mobile: true, Dark: true}
	desktopLight = layout{Name: "desktop-light", Width: 1280, Height: 900}
	desktopDark  = layout{Name: "desktop-dark", Width: 1280, Height: 900, Dark: true}
	allLayouts   = []layout{phoneLight, phoneDark, desktopLight, desktopDark}
)

// setLayout resizes the tab's viewport (with mobile emulation for phones, so the page lays out
// at device width as a phone browser does) and sets prefers-color-scheme.
func (tb *tab) setLayout(t *testing.T, l layout) {
	t.Helper()
	opts := []chromedp.EmulateViewportOption{}
	if l.Mobile {
		// No touch emulation: with it, chromedp's synthesized mouse clicks are sometimes lost, and a
		// tap on a real phone produces the same click event anyway.
		opts = append(opts, chromedp.EmulateMobile, chromedp.EmulatePortrait)
	}
	scheme := "light"
	if l.Dark {
		scheme = "dark"
	}
	tb.do(t, 30*time.Second,
		chromedp.EmulateViewport(l.Width, l.Height, opts...),
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
			})
			return err
		}),
	)
	// Wait until the page has laid out at the new width (a resize is asynchronous to the page).
	waitJS(t, tb, 30*time.Second, fmt.Sprintf(`innerWidth === %d && matchMedia('(prefers-color-scheme: %s)').matches`, l.Width, scheme), "layout "+l.Name)
}

// eachLayout runs fn once per layout (phone and desktop, light and dark), each as a subtest on the
// same tab, and puts the tab back to desktop-light afterwards.
func eachLayout(t *testing.T, tb *tab, fn func(t *testing.T, l layout)) {
	t.Helper()
	for _, l := range allLayouts {
		t.Run(l.Name, func(t *testing.T) {
			tb.setLayout(t, l)
			fn(t, l)
		})
	}
	tb.setLayout(t, desktopLight)
}

// loginTab opens a new tab (own cookies), logs in through the form with the stack's token and
// waits for the websocket to connect.
func loginTab(t *testing.T, stack *browserStack, browser context.Context) *tab {
	t.Helper()
	tb := newTab(t, browser, false)
	tb.do(t, 30*time.Second,
		chromedp.Navigate(stack.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SetValue(chromedp.CSS("#token"), stack.Token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#input")),
	)
	waitConnected(t, tb)
	return tb
}

// waitConnected waits for the page's websocket to be open (the connection line says so).
func waitConnected(t *testing.T, tb *tab) {
	t.Helper()
	waitJS(t, tb, 30*time.Second, `!!window.citegate && !!citegate.state.ws && citegate.state.ws.readyState === 1 && !document.getElementById('conn').classList.contains('down')`, "websocket connects")
}

// ---------- accessibility audit (axe-core) ----------

var (
	axeOnce sync.Once
	axeSrc  string
	axeWhy  string
)

// axeSource reads axe.min.js: $CITEGATE_AXE, else where .ci/run installs it
// ($HOME/.cache/citegate/axe-core-4.14.1/node_modules/axe-core/axe.min.js). Empty with a reason when missing.
func axeSource() (string, string) {
	axeOnce.Do(func() {
		p := os.Getenv("CITEGATE_AXE")
		if p == "" {
			home, _ := os.UserHomeDir()
			p = filepath.Join(home, ".cache", "citegate", "axe-core-4.14.1", "node_modules", "axe-core", "axe.min.js")
		}
		b, err := os.ReadFile(p)
		if err != nil {
			axeWhy = fmt.Sprintf("axe-core not found (%v): run .ci/run once, or npm install axe-core@4 and set CITEGATE_AXE to axe.min.js", err)
			return
		}
		axeSrc = string(b)
	})
	return axeSrc, axeWhy
}

// axeViolation is one failed axe rule with the first few offending nodes.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// auditA11y runs axe-core inside the page as it is now and fails on any serious or critical
// violation. Without axe-core it logs one line and returns, except under CI=true, where .ci/run
// installs it and a missing audit is a failure.
func auditA11y(t *testing.T, tb *tab, what string) {
	t.Helper()
	src, why := axeSource()
	if src == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("accessibility audit of %s: %s", what, why)
		}
		t.Logf("skipping accessibility audit of %s: %s", what, why)
		return
	}
	// Runtime.evaluate is not subject to the page's Content-Security-Policy, so the audit can be
	// injected into the real page without loosening it.
	if !evalJS[bool](t, tb, `!!window.axe`) {
		ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](src))
		cancel()
		require.NoError(t, err, "inject axe-core")
	}
	// Animations (the citation flash, the drawer slide) would leave colours mid-transition.
	ctx, cancel := context.WithTimeout(tb.ctx, 60*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`(async () => {
		await new Promise((r) => setTimeout(r, 350));
		const res = await axe.run(document, { resultTypes: ['violations'] });
		return res.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => ({
			id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.slice(0, 6).map((n) => n.target.join(' ') + ' — ' + (n.failureSummary || '').replace(/\s+/g, ' ')),
		}));
	})()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err, "axe.run")
	var vs []axeViolation
	require.NoError(t, json.Unmarshal(raw, &vs))
	if len(vs) > 0 {
		var b strings.Builder
		for _, v := range vs {
			fmt.Fprintf(&b, "\n  [%s] %s: %s", v.Impact, v.ID, v.Help)
			for _, n := range v.Nodes {
				fmt.Fprintf(&b, "\n      %s", n)
			}
		}
		t.Errorf("accessibility audit of %s: %d serious/critical violations:%s", what, len(vs), b.String())
	}
}

// ---------- keyboard ----------

// focusStop is one element reached with Tab.
type focusStop struct {
	Desc    string `json:"desc"`    // tag#id.class[aria-label]
	Visible bool   `json:"visible"` // :focus-visible matched and an outline or box-shadow is drawn
	OnPage  bool   `json:"onPage"`  // it has a box (not display:none / zero size)
}

// tabThrough presses Tab up to max times from the top of the document and returns the focus
// stops in order (it stops early when focus comes back to the first stop).
func tabThrough(t *testing.T, tb *tab, max int) []focusStop {
	t.Helper()
	evalJS[bool](t, tb, `(document.activeElement && document.activeElement.blur(), window.scrollTo(0, 0), true)`)
	var stops []focusStop
	for range max {
		tb.do(t, 15*time.Second, chromedp.KeyEvent("\t"))
		raw := evalJS[[]byte](t, tb, focusedStopJS)
		var s focusStop
		require.NoError(t, json.Unmarshal(raw, &s))
		if len(stops) > 0 && s.Desc == stops[0].Desc {
			break
		}
		stops = append(stops, s)
	}
	return stops
}

// requireReachable checks that every wanted selector fragment (e.g. "#new-chat", "button.copy")
// names at least one focus stop, and that every stop shows its focus.
func requireReachable(t *testing.T, stops []focusStop, want ...string) {
	t.Helper()
	descs := make([]string, len(stops))
	for i, s := range stops {
		descs[i] = s.Desc
		if s.Desc != "body" {
			if !s.Visible {
				t.Errorf("focus on %s is not visible", s.Desc)
			}
			if !s.OnPage {
				t.Errorf("focus went to %s, which has no box on the page", s.Desc)
			}
		}
	}
	for _, w := range want {
		found := false
		for _, d := range descs {
			if matchesDesc(d, w) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s is not reachable with Tab; focus order: %s", w, strings.Join(descs, " → "))
		}
	}
}

// matchesDesc reports whether a focus-stop description satisfies a simple selector made of a tag,
// #id and .class parts.
func matchesDesc(desc, sel string) bool {
	base, _, _ := strings.Cut(desc, "[")
	parts := strings.FieldsFunc(sel, func(r rune) bool { return r == '.' || r == '#' })
	descParts := map[string]bool{}
	for _, p := range strings.FieldsFunc(base, func(r rune) bool { return r == '.' || r == '#' }) {
		descParts[p] = true
	}
	for _, p := range parts {
		if !descParts[p] {
			return false
		}
	}
	return len(parts) > 0
}

// ---------- data ----------

// seedChat stores a desktop chat of n messages for the stack's user (questions and ~1.7 KB
// answers with markers, a table, code and two verified sources) and returns its session id.
func seedChat(t testing.TB, stack *browserStack, title string, n int) string {
	t.Helper()
	ctx := context.Background()
	s, err := stack.Store.CreateSession(ctx, store.Session{UserID: stack.User.ID, Channel: "desktop", Title: title})
	require.NoError(t, err)
	kb := stack.URL + "/kb/"
	meta := json.RawMessage(`{"citations":[{"n":1,"url":"` + kb + `annual-leave","title":"年假规定"},{"n":2,"url":"` + kb + `expense-reimbursement","title":"费用报销"}],"links":{"hidden":0,"allowed":[]}}`)
	answer := "## 年假天数\n\n根据**员工手册**，年假天数按工龄计算[^1^]；申请需提前三天在系统提交[^2^]。\n\n" +
		"| 工龄 | 年假 |\n| --- | --- |\n| 1–10 年 | 5 天 |\n| 10 年以上 | 10 天 |\n\n" +
		"1. 登录系统\n2. 选择「请假」\n3. 提交审批[^2^]\n\n```bash\ncurl -s https://hr.example.com/api/leave\n```\n"
	for i := range n {
		m := store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprintf("第 %d 个问题：年假有几天？", i/2+1)}
		if i%2 == 1 {
			m = store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: answer, Metadata: meta}
		}
		_, err := stack.Store.AppendMessage(ctx, m)
		require.NoError(t, err)
	}
	return s.ID
}

// ---------- screenshots ----------

// shot saves a viewport screenshot named name.png. With CITEGATE_UPDATE_SCREENSHOTS=1 it goes to
// the repository's docs/screenshots/ (the README shows them); otherwise beside the other browser
// screenshots (a temporary directory, or $CITEGATE_SCREENSHOT_DIR).
func shot(t *testing.T, tb *tab, name string) {
	t.Helper()
	if os.Getenv("CITEGATE_UPDATE_SCREENSHOTS") != "1" {
		screenshot(t, tb, name)
		return
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "docs", "screenshots")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	// Let transitions (drawer, toasts) settle so the picture is the resting state.
	time.Sleep(400 * time.Millisecond)
	ctx, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	p := filepath.Join(dir, name+".png")
	require.NoError(t, os.WriteFile(p, png, 0o644))
	t.Logf("screenshot: %s", p)
}

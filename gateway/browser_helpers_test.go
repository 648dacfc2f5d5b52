package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

// browserPath finds a Chromium-family browser: $CITEGATE_CHROMIUM first, then the usual names.
func browserPath() string {
	if p := os.Getenv("CITEGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// requireBrowser returns the browser path, skipping the test locally when none is installed. In CI
// (CI=true) a missing browser fails: the browser suite must never silently not run there.
func requireBrowser(t *testing.T) string {
	t.Helper()
	p := browserPath()
	if p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("browser %s (CITEGATE_CHROMIUM): %v", p, err)
		}
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium found but CI=true: install it (apt-get install -y chromium) or set CITEGATE_CHROMIUM")
	}
	t.Skip("skipping browser test: no Chromium found (apt-get install -y chromium, or set CITEGATE_CHROMIUM)")
	return ""
}

// browserStack is the real citegate stack on a loopback listener: bbolt store, bundled corpus,
// extractive agent with web_search, gateway.
type browserStack struct {
	URL   string
	Store *store.Store
	User  store.User
	Token string
}

// newBrowserStack builds the stack; model nil means the offline extractive model (the default a
// new user gets). opts adjust the gateway's configuration (e.g. ChatRatePerMinute). The chat rate
// is 1,000 a minute unless an option says otherwise: a test that sends six questions within a few
// seconds is not about the limiter (the default 20 a minute, burst 5, refused the sixth of
// TestBrowserStreamingLayouts when the machine ran it fast).
func newBrowserStack(t *testing.T, model agent.Model, opts ...func(*gateway.Config)) *browserStack {
	t.Helper()
	if model == nil {
		model = extractive.New()
	}
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "citegate.db"), store.Options{})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pub := "http://" + ln.Addr().String()
	corpus, err := tools.LoadCorpus("", pub)
	require.NoError(t, err)
	ag, err := agent.New(agent.Config{Store: st, Model: model, Tools: []agent.Tool{tools.NewWebSearch(corpus, nil)}})
	require.NoError(t, err)
	cfg := gateway.Config{
		Addr: ln.Addr().String(), PublicURL: pub, DataDir: dir, Store: st, Agent: ag, KB: corpus.Handler(),
		SiteName: corpus.SiteName, ChatRatePerMinute: 1000,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := gateway.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("gateway did not stop")
		}
		closeCtx, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		_ = ag.Close(closeCtx)
		_ = st.Close()
	})
	u, tok, err := st.CreateUser(context.Background(), "browser")
	require.NoError(t, err)
	return &browserStack{URL: pub, Store: st, User: u, Token: tok}
}

// api calls the JSON API with the user's token.
func (s *browserStack) api(t *testing.T, method, path string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	if out != nil && res.StatusCode < 300 {
		require.NoError(t, json.NewDecoder(res.Body).Decode(out))
	}
	return res.StatusCode
}

// newBrowser starts a headless Chromium with a fresh profile and returns its root context. Every
// tab made from it with newTab shares the browser.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := requireBrowser(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("lang", "zh-CN"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser; it must not carry a timeout (that would stop the browser).
	require.NoError(t, chromedp.Do(ctx), "start %s", path)
	return ctx
}

// tab is one browser tab in its own browser context (own cookies), with the page language set to
// Chinese and every JavaScript dialog recorded (and dismissed, so a dialog cannot hang the test).
type tab struct {
	ctx     context.Context
	mu      sync.Mutex
	dialogs []string
}

func newTab(t *testing.T, browser context.Context, scriptDisabled bool) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tb := &tab{ctx: ctx}
	require.NoError(t, chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tt *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, emulation.SetUserAgentOverride, emulation.SetUserAgentOverrideParams{
			UserAgent: "Mozilla/5.0 (X11; Linux x86_64) citegate-browser-test", AcceptLanguage: "zh-CN,zh",
		}); err != nil {
			return err
		}
		if scriptDisabled {
			if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
				return err
			}
		}
		return nil
	})))
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.dialogs = append(tb.dialogs, ev.Message)
			tb.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return tb
}

func (tb *tab) Dialogs() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.dialogs...)
}

// do runs actions with a timeout; the tab's context stays usable afterwards.
func (tb *tab) do(t *testing.T, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// eval evaluates a JavaScript expression and decodes its result.
func evalJS[T any](t *testing.T, tb *tab, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, "evaluate %s", expr)
	return v
}

// screenshotDir is one directory per test binary run, kept after the tests so the PNGs can be
// looked at (CI uploads it as an artifact).
var (
	shotOnce sync.Once
	shotDir  string
	shotErr  error
)

func screenshot(t *testing.T, tb *tab, name string) {
	t.Helper()
	shotOnce.Do(func() {
		if d := os.Getenv("CITEGATE_SCREENSHOT_DIR"); d != "" {
			shotDir, shotErr = d, os.MkdirAll(d, 0o755)
			return
		}
		shotDir, shotErr = os.MkdirTemp("", "citegate-browser-")
	})
	require.NoError(t, shotErr)
	ctx, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	p := filepath.Join(shotDir, name+".png")
	require.NoError(t, os.WriteFile(p, png, 0o644))
	t.Logf("screenshot: %s", p)
}

// waitJS polls a JavaScript predicate until it is true, failing with msg after timeout.
func waitJS(t *testing.T, tb *tab, timeout time.Duration, expr, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout") {
			html, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
			t.Fatalf("%s: not true after %s: %s\npage text: %s", msg, timeout, expr, html)
		}
		t.Fatalf("%s: %v", msg, err)
	}
}

// slowModel streams its answer slowly so a run can be cancelled mid-way, and fails on request.
type slowModel struct{}

func (slowModel) Name() string { return "slow test model" }

func (slowModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	last := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			last = m.Content
		}
	}
	if strings.Contains(last, "fail") {
		return agent.ModelResponse{}, errors.New("upstream model unavailable")
	}
	var text strings.Builder
	tick := time.NewTicker(40 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < 500; i++ {
		select {
		case <-ctx.Done():
			return agent.ModelResponse{Text: text.String()}, ctx.Err()
		case <-tick.C:
		}
		chunk := fmt.Sprintf("part %d <b>[^", i)
		if i%2 == 1 {
			chunk = fmt.Sprintf("%d^]</b> ", i)
		}
		text.WriteString(chunk)
		onDelta(chunk)
	}
	return agent.ModelResponse{Text: text.String()}, nil
}

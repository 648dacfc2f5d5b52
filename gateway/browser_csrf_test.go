package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/gateway"
	"github.com/citegate/citegate/store"
)

// loginLink is a fresh one-time login link for the stack's user, as `citegate user login` prints.
func (s *browserStack) loginLink(t *testing.T) string {
	t.Helper()
	code, _, err := s.Store.CreateLoginCode(context.Background(), s.User.ID, 0)
	require.NoError(t, err)
	return gateway.LoginURL(s.URL, code)
}

// TestBrowserLoginLinkAndCSRF logs in through a real one-time login link, then lets a page served
// from another origin try to create a share with the browser's cookie. The other origin is another
// port on 127.0.0.1: the same *site*, so SameSite=Strict does not stop the cookie and only the
// server's origin check stands between the page and the user's session.
func TestBrowserLoginLinkAndCSRF(t *testing.T) {
	requireBrowser(t) // skip before building the stack when there is no browser
	stack := newBrowserStack(t, nil)
	ctx := context.Background()
	sess, err := stack.Store.CreateSession(ctx, store.Session{UserID: stack.User.ID, Channel: "desktop", Title: "csrf"})
	require.NoError(t, err)
	_, err = stack.Store.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "hi"})
	require.NoError(t, err)
	_, err = stack.Store.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: "hello"})
	require.NoError(t, err)
	sharePath := "/api/sessions/" + sess.ID + "/shares"

	browser := newBrowser(t)
	tb := newTab(t, browser, false)
	link := stack.loginLink(t)
	tb.do(t, 15*time.Second, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("#input")))
	waitJS(t, tb, 30*time.Second, `document.getElementById('conn').textContent === '已连接'`, "websocket connects")
	assert.Equal(t, stack.URL+"/", evalJS[string](t, tb, `location.href`), "the code left the address bar")

	// The same link a second time logs nobody in (fresh browser context, no cookie).
	other := newTab(t, browser, false)
	other.do(t, 15*time.Second, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("#token")))
	assert.Contains(t, evalJS[string](t, other, `document.body.innerText`), "已过期或已被使用")

	// The hostile page: an auto-submitting form (a "simple" request, no preflight) and a fetch
	// with credentials, both aimed at the share endpoint.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/form":
			fmt.Fprintf(w, `<!doctype html><form id=f method=POST action=%q></form><script>document.getElementById('f').submit()</script>`,
				stack.URL+sharePath)
		default:
			fmt.Fprintf(w, `<!doctype html><script>
window.__done = false;
fetch(%q, {method: 'POST', credentials: 'include', mode: 'no-cors'}).finally(() => { window.__done = true; });
</script>`, stack.URL+sharePath)
		}
	}))
	defer evil.Close()
	require.NotEqual(t, stack.URL, evil.URL)

	tb.do(t, 15*time.Second, chromedp.Navigate(evil.URL+"/fetch"))
	waitJS(t, tb, 30*time.Second, `window.__done === true`, "the cross-origin fetch went out")
	tb.do(t, 15*time.Second, chromedp.Navigate(evil.URL+"/form"))
	waitJS(t, tb, 30*time.Second, `location.href.indexOf('/shares') >= 0 && document.body && document.body.innerText.length > 0`,
		"the form post reached the gateway")
	body := evalJS[string](t, tb, `document.body.innerText`)
	assert.Contains(t, body, `"code":"forbidden"`, "the cookie-authenticated cross-origin POST is refused")
	assert.NotContains(t, body, `"token"`)

	// The fetch's answer is opaque to the page (and to this test); the form shows the server's.
	// From the app's own page, the same cookie POST works.
	tb.do(t, 15*time.Second, chromedp.Navigate(stack.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#input")))
	evalJS[bool](t, tb, `(window.__share = null, fetch(`+jsString(sharePath)+`, {method: 'POST'}).then(r => r.json().then(j => { window.__share = {status: r.status, url: j.url || ''}; })), true)`)
	waitJS(t, tb, 30*time.Second, `window.__share !== null`, "the app's own share request finished")
	assert.Equal(t, float64(http.StatusCreated), evalJS[float64](t, tb, `window.__share.status`), "same-origin cookie POST works")
	assert.True(t, strings.HasPrefix(evalJS[string](t, tb, `window.__share.url`), stack.URL+"/s/"))
}

package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// get sends a GET without following redirects, with extra headers.
func (e *testEnv) get(path string, h http.Header, cookies ...*http.Cookie) (*http.Response, string) {
	e.t.Helper()
	return e.send("GET", path, h, cookies...)
}

func (e *testEnv) send(method, path string, h http.Header, cookies ...*http.Cookie) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, nil)
	require.NoError(e.t, err)
	for k, v := range h {
		req.Header[k] = v
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := noRedirect.Do(req)
	require.NoError(e.t, err)
	return resp, readAll(e.t, resp)
}

func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == CookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", CookieName, resp.Header)
	return nil
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// codeOf extracts the one-time code from a login link.
func codeOf(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	require.NoError(t, err)
	require.Equal(t, LoginPath, u.Path, link)
	require.NotEmpty(t, u.Query().Get("code"), link)
	return u.Query().Get("code")
}

func TestLoginLinkFlow(t *testing.T) {
	e := newEnv(t)
	_, tok := e.user("alice")
	ctx := context.Background()

	status, _, body := e.do("GET", "/", "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.NotContains(t, body, "alice", "logged-out visitors get the login page")

	link, exp, err := e.srv.LoginLink(ctx, "ALICE")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(link, e.srv.cfg.PublicURL+"/login?code="), link)
	assert.NotContains(t, link, tok, "the access token never travels in a URL")
	assert.WithinDuration(t, time.Now().Add(15*time.Minute), exp, time.Minute)

	u, _ := url.Parse(link)
	resp, page := e.get(u.RequestURI(), nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	ck := sessionCookie(t, resp)
	assert.NotEqual(t, tok, ck.Value, "the cookie carries a web session, not the access token")
	assert.True(t, ck.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	assert.Equal(t, "/", ck.Path)
	assert.Contains(t, page, `http-equiv="refresh" content="0;url=/"`, "on to a URL without the code")
	assert.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"), "the code does not leak in Referer")

	// The cookie authenticates the app shell and the API.
	resp, page = e.get("/", nil, ck)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, page, "alice", "the app shell names the user")
	resp, _ = e.get("/api/me", nil, ck)
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// A second use of the same link logs nobody in.
	resp, page = e.get(u.RequestURI(), nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Empty(t, resp.Cookies())
	assert.Contains(t, page, "已过期或已被使用")

	// Logout ends the session on the server, not only in this browser.
	resp, _ = e.send("POST", "/logout", hdr("Origin", e.ts.URL), ck)
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.True(t, sessionCookie(t, resp).MaxAge < 0)
	resp, _ = e.get("/api/me", nil, ck)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a logged-out session cookie no longer works")
}

// TestTokenInQueryNoLongerLogsIn: `GET /?token=T` was a login CSRF (the link logs the visitor in as
// its maker) and put the long-lived token in URLs.
func TestTokenInQueryNoLongerLogsIn(t *testing.T) {
	e := newEnv(t)
	_, tok := e.user("alice")
	resp, page := e.get("/?token="+url.QueryEscape(tok), nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, resp.Cookies(), "no cookie from a token in the URL")
	assert.Contains(t, page, `name="token"`, "the login form is shown")
	assert.Contains(t, page, "不再用于登录")
	assert.NotContains(t, page, "alice")
}

func TestLoginForm(t *testing.T) {
	e := newEnv(t)
	_, tok := e.user("alice")
	post := func(h http.Header, token string) *http.Response {
		req, _ := http.NewRequest("POST", e.ts.URL+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		readAll(t, resp)
		return resp
	}
	resp := post(hdr("Origin", e.ts.URL), tok)
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	ck := sessionCookie(t, resp)
	assert.NotEqual(t, tok, ck.Value)
	r2, _ := e.get("/api/me", nil, ck)
	assert.Equal(t, http.StatusOK, r2.StatusCode)

	resp = post(nil, tok) // curl: no Origin, no Fetch Metadata
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp = post(hdr("Origin", e.ts.URL), "nope")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Empty(t, resp.Cookies())

	// Login CSRF: another site posting its maker's token into the form.
	resp = post(hdr("Origin", "null", "Sec-Fetch-Site", "same-origin"), tok) // Chrome, from our no-referrer page
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	for _, h := range []http.Header{hdr("Origin", "http://evil.example"), hdr("Sec-Fetch-Site", "cross-site"), hdr("Origin", "null")} {
		resp = post(h, tok)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Empty(t, resp.Cookies())
	}
}

// TestCookieStateChangesNeedOwnOrigin is the CSRF contract (DESIGN §5): a state change authenticated
// by the cookie must come from our own origin; bearer requests are not affected.
func TestCookieStateChangesNeedOwnOrigin(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	sess := e.session(u, "t")
	e.runTurn(sess.ID, "问题")
	link, _, err := e.srv.LoginLink(context.Background(), "alice")
	require.NoError(t, err)
	lu, _ := url.Parse(link)
	resp, _ := e.get(lu.RequestURI(), nil)
	ck := sessionCookie(t, resp)
	legacy := &http.Cookie{Name: CookieName, Value: tok} // a cookie set before login codes existed

	countShares := func() int {
		shares, err := e.st.ListShares(context.Background(), u.ID)
		require.NoError(t, err)
		return len(shares)
	}
	sharePath := "/api/sessions/" + sess.ID + "/shares"
	refused := []struct {
		name string
		h    http.Header
		ck   *http.Cookie
	}{
		{"foreign origin", hdr("Origin", "http://evil.example"), ck},
		{"foreign origin, legacy token cookie", hdr("Origin", "http://evil.example"), legacy},
		{"foreign origin claiming same-origin fetch metadata", hdr("Origin", "http://evil.example", "Sec-Fetch-Site", "same-origin"), ck},
		{"null origin", hdr("Origin", "null"), ck},
		{"cross-site fetch metadata", hdr("Sec-Fetch-Site", "cross-site"), ck},
		{"same-site sibling", hdr("Sec-Fetch-Site", "same-site"), ck},
		{"no origin information", nil, ck},
	}
	for _, c := range refused {
		t.Run("POST refused: "+c.name, func(t *testing.T) {
			resp, body := e.send("POST", sharePath, c.h, c.ck)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode)
			assert.Contains(t, body, `{"error":{"code":"forbidden","message":"cross-origin request refused`)
			assert.Zero(t, countShares(), "nothing was shared")
		})
	}

	// Same origin is accepted: by Origin, by Fetch Metadata alone, and Chrome's same-origin POST
	// from a no-referrer page (Origin "null" plus Fetch Metadata). Sharing the same state twice
	// answers the existing share (200).
	accepted := []http.Header{hdr("Origin", e.ts.URL), hdr("Sec-Fetch-Site", "same-origin"), hdr("Origin", "null", "Sec-Fetch-Site", "same-origin")}
	for i, h := range accepted {
		resp, body := e.send("POST", sharePath, h, ck)
		want := http.StatusOK
		if i == 0 {
			want = http.StatusCreated
		}
		require.Equal(t, want, resp.StatusCode, "%v: %s", h, body)
	}
	require.Equal(t, 1, countShares())
	var sh shareJSON
	_, body := e.send("POST", sharePath, hdr("Authorization", "Bearer "+tok)) // bearer, no origin at all
	require.NoError(t, json.Unmarshal([]byte(body), &sh))

	// DELETE likewise.
	for _, c := range refused {
		t.Run("DELETE refused: "+c.name, func(t *testing.T) {
			resp, _ := e.send("DELETE", "/api/shares/"+sh.Token, c.h, c.ck)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		})
	}
	resp, _ = e.get("/s/"+sh.Token, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the share survived every refused DELETE")
	resp, _ = e.send("DELETE", "/api/shares/"+sh.Token, hdr("Origin", e.ts.URL), ck)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Zero(t, countShares())

	// Bearer requests are unaffected by a foreign Origin.
	sh = e.createShare(tok, sess.ID)
	resp, _ = e.send("DELETE", "/api/shares/"+sh.Token, hdr("Origin", "http://evil.example", "Authorization", "Bearer "+tok))
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)

	// Reads are not state changes: a cookie GET from anywhere still works (CORS keeps the answer
	// from a foreign page).
	resp, _ = e.get("/api/sessions", hdr("Origin", "http://evil.example"), ck)
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// Logout from another site is refused too.
	resp, _ = e.send("POST", "/logout", hdr("Origin", "http://evil.example"), ck)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = e.get("/api/me", nil, ck)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestLoginCodeExpiresAndRacesOnce uses the store's injected clock.
func TestLoginCodeExpiresAndRacesOnce(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	st, err := store.Open(filepath.Join(t.TempDir(), "clock.db"), store.Options{Now: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e := newEnv(t, func(c *Config, a *agentCfg) { c.Store = st; a.Store = st })
	ctx := context.Background()
	_, _, err = st.CreateUser(ctx, "alice")
	require.NoError(t, err)

	link, exp, err := e.srv.LoginLink(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, now.Add(15*time.Minute), exp)
	advance(15 * time.Minute)
	u, _ := url.Parse(link)
	resp, _ := e.get(u.RequestURI(), nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "expired after 15 minutes")
	assert.Empty(t, resp.Cookies())

	link, _, err = e.srv.LoginLink(ctx, "alice")
	require.NoError(t, err)
	advance(15*time.Minute - time.Second)
	u, _ = url.Parse(link)

	// A subresource (an <img> on another page) may not spend the code; the code stays usable.
	resp, _ = e.get(u.RequestURI(), hdr("Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Dest", "image"))
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Empty(t, resp.Cookies())

	// Racing navigations: one logs in.
	var wg sync.WaitGroup
	var okMu sync.Mutex
	ok := 0
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := noRedirect.Get(e.ts.URL + u.RequestURI())
			if err != nil {
				t.Error(err)
				return
			}
			readAll(t, resp)
			if resp.StatusCode == http.StatusOK && len(resp.Cookies()) == 1 {
				okMu.Lock()
				ok++
				okMu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, ok)
}

func TestEnsureLocalUser(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	link, err := e.srv.EnsureLocalUser(ctx)
	require.NoError(t, err)
	code := codeOf(t, link)
	require.True(t, strings.HasPrefix(link, e.srv.cfg.PublicURL+"/login?code="), link)
	n, err := e.st.CountUsers(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	// The printed link logs in as local, once.
	resp, _ := e.get("/login?code="+url.QueryEscape(code), nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	r2, body := e.get("/api/me", nil, sessionCookie(t, resp))
	assert.Equal(t, http.StatusOK, r2.StatusCode)
	assert.Contains(t, body, `"local"`)

	// Next start: a fresh link for the same user, no second user.
	link2, err := e.srv.EnsureLocalUser(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, code, codeOf(t, link2))
	n, err = e.st.CountUsers(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	// A revoked local user gets no link.
	_, err = e.st.RevokeUser(ctx, "local")
	require.NoError(t, err)
	link, err = e.srv.EnsureLocalUser(ctx)
	require.NoError(t, err)
	assert.Empty(t, link)
}

// waitClosed waits until the server has closed the connection (the read loop ended).
func (w *wsConn) waitClosed(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-w.frames:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the websocket was not closed")
		}
	}
}

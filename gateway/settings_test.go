package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// webCookie starts a browser session for u, as a login would.
func (e *testEnv) webCookie(u store.User) *http.Cookie {
	e.t.Helper()
	c, err := e.st.CreateWebSession(context.Background(), u.ID, time.Hour)
	require.NoError(e.t, err)
	return &http.Cookie{Name: CookieName, Value: c}
}

// putSettings sends PUT /api/me/settings with body and headers.
func (e *testEnv) putSettings(body string, h http.Header, cookies ...*http.Cookie) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPut, e.ts.URL+"/api/me/settings", strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header[k] = v
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := noRedirect.Do(req)
	require.NoError(e.t, err)
	return resp.StatusCode, readAll(e.t, resp)
}

func (e *testEnv) languageOf(u store.User) string {
	e.t.Helper()
	got, err := e.st.GetUser(context.Background(), u.ID)
	require.NoError(e.t, err)
	return got.Language
}

func decodeSettings(t *testing.T, body string) settingsJSON {
	t.Helper()
	var s settingsJSON
	require.NoError(t, json.Unmarshal([]byte(body), &s), body)
	return s
}

// TestSettingsRoute: GET and PUT /api/me/settings — authentication, the same-origin rule for
// cookie requests, and a clear 400 for every bad body, none of which changes what is stored.
func TestSettingsRoute(t *testing.T) {
	e := newEnv(t)
	alice, aliceTok := e.user("alice")
	bob, _ := e.user("bob")
	bearer := hdr("Authorization", "Bearer "+aliceTok)

	resp, body := e.get("/api/me/settings", nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	code, body := e.putSettings(`{"language":"en"}`, nil)
	assert.Equal(t, http.StatusUnauthorized, code, body)

	// No choice yet: the browser decides.
	resp, body = e.get("/api/me/settings", hdr("Authorization", "Bearer "+aliceTok, "Accept-Language", "en-GB,en;q=0.9"))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	assert.Equal(t, settingsJSON{Language: "", EffectiveLanguage: "en", Languages: []string{"zh", "en"}}, decodeSettings(t, body))
	_, body = e.get("/api/me/settings", bearer)
	assert.Equal(t, "zh", decodeSettings(t, body).EffectiveLanguage, "Chinese without an English Accept-Language")

	code, body = e.putSettings(`{"language":"en"}`, hdr("Authorization", "Bearer "+aliceTok, "Accept-Language", "zh-CN"))
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, settingsJSON{Language: "en", EffectiveLanguage: "en", Languages: []string{"zh", "en"}}, decodeSettings(t, body))
	assert.Equal(t, "en", e.languageOf(alice))
	assert.Empty(t, e.languageOf(bob), "only the caller's setting changes")

	bad := map[string]string{
		`{"language":"fr"}`:                   `language must be`,
		`{"language":"EN"}`:                   `language must be`,
		`{"language":"zh-CN"}`:                `language must be`,
		`{"language":null}`:                   `language is required`,
		`{}`:                                  `language is required`,
		`{"language":5}`:                      `not the expected JSON object`,
		`{"language":"zh","theme":"dark"}`:    `unknown field`,
		`{"language":"zh"`:                    `not the expected JSON object`,
		`{"language":"zh"} {"language":"en"}`: `more than one JSON value`,
		``:                                    `needs a JSON body`,
		`{"language":"` + strings.Repeat("z", 2000) + `"}`: `larger than 1024 bytes`,
	}
	for in, want := range bad {
		code, body := e.putSettings(in, bearer)
		assert.Equal(t, http.StatusBadRequest, code, "%.40q: %s", in, body)
		assert.Contains(t, body, `"code":"bad_request"`, "%.40q", in)
		assert.Contains(t, body, want, "%.40q", in)
	}
	assert.Equal(t, "en", e.languageOf(alice), "a refused change stores nothing")

	// A browser session may change the setting only from our own pages.
	ck := e.webCookie(alice)
	for _, h := range []http.Header{nil, hdr("Origin", "http://evil.example"), hdr("Sec-Fetch-Site", "cross-site"), hdr("Origin", "null")} {
		code, body := e.putSettings(`{"language":"zh"}`, h, ck)
		assert.Equal(t, http.StatusForbidden, code, "%v: %s", h, body)
		assert.Contains(t, body, "cross-origin request refused")
	}
	assert.Equal(t, "en", e.languageOf(alice))
	resp, body = e.get("/api/me/settings", nil, ck)
	require.Equal(t, http.StatusOK, resp.StatusCode, "reading needs no origin check")
	assert.Equal(t, "en", decodeSettings(t, body).Language)
	code, body = e.putSettings(`{"language":"zh"}`, hdr("Sec-Fetch-Site", "same-origin"), ck)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "zh", e.languageOf(alice))
	code, body = e.putSettings(`{"language":""}`, hdr("Origin", e.ts.URL), ck)
	require.Equal(t, http.StatusOK, code, body)
	assert.Empty(t, e.languageOf(alice), "the empty language follows the browser again")

	// Other methods are not routes (the API's catch-all answers them as any unknown path).
	resp, body = e.send(http.MethodPost, "/api/me/settings", bearer)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Contains(t, body, `"code":"not_found"`)
}

// TestUserLanguageWinsOverBrowser: once a user chose a language, everything rendered for the user
// is in it whatever the browser says — the app shell, API answers, the share page (for a signed-in
// viewer), the operator console, and the websocket's rendered answers and notices. Without a
// choice, and for anonymous viewers, the browser still decides.
func TestUserLanguageWinsOverBrowser(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *agentCfg) { c.ChatRatePerMinute = 1 })
	ctx := context.Background()
	alice, aliceTok := e.user("alice")
	bob, _ := e.user("bob")
	olga, _, err := e.st.CreateUserRole(ctx, "olga", true, store.Actor{Name: "cli:test"})
	require.NoError(t, err)
	sess := e.session(alice, "假期")
	e.runTurn(sess.ID, "年假有几天")
	last, err := e.st.LastMessageID(ctx, sess.ID)
	require.NoError(t, err)
	shareTok, _, err := e.st.CreateShare(ctx, sess.ID, alice.ID, last)
	require.NoError(t, err)
	_, err = e.st.SetLanguage(ctx, alice.ID, store.LangEN)
	require.NoError(t, err)
	_, err = e.st.SetLanguage(ctx, olga.ID, store.LangEN)
	require.NoError(t, err)
	_, err = e.st.SetLanguage(ctx, bob.ID, store.LangZH)
	require.NoError(t, err)
	zhBrowser := hdr("Accept-Language", "zh-CN,zh;q=0.9")
	enBrowser := hdr("Accept-Language", "en-US,en;q=0.9")
	aliceCk, bobCk, olgaCk := e.webCookie(alice), e.webCookie(bob), e.webCookie(olga)

	// The app shell.
	resp, body := e.get("/", zhBrowser, aliceCk)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, `<html lang="en" data-lang="en">`)
	assert.Contains(t, body, "New chat")
	assert.Contains(t, body, `data-choice="en" lang="en" aria-pressed="true"`)
	assert.Contains(t, body, `data-choice="" aria-pressed="false"`)
	// A chat opened by its address arrives rendered into the shell: its answers too.
	_, body = e.get("/?s="+sess.ID, zhBrowser, aliceCk)
	assert.Contains(t, body, "<summary>Sources 1</summary>")
	assert.NotContains(t, body, "<summary>来源")
	_, body = e.get("/", enBrowser, bobCk)
	assert.Contains(t, body, `<html lang="zh-CN" data-lang="zh">`, "a choice of Chinese wins over an English browser")
	assert.Contains(t, body, `data-choice="zh" lang="zh-CN" aria-pressed="true"`)
	// The login page, before anyone signed in, follows the browser.
	_, body = e.get("/", enBrowser)
	assert.Contains(t, body, `lang="en"`)
	assert.Contains(t, body, "Sign in to citegate")

	// API answers rendered on the server.
	_, body = e.get("/api/sessions/"+sess.ID+"/messages", hdr("Authorization", "Bearer "+aliceTok, "Accept-Language", "zh-CN"))
	assert.Contains(t, body, "<summary>Sources 1</summary>")
	assert.NotContains(t, body, "<summary>来源")
	_, body = e.get("/api/sessions/"+sess.ID+"/export.md", hdr("Authorization", "Bearer "+aliceTok, "Accept-Language", "zh-CN"))
	assert.Contains(t, body, "Assistant")
	_, body = e.get("/api/sessions/"+sess.ID+"/export.md?lang=zh", hdr("Authorization", "Bearer "+aliceTok))
	assert.Contains(t, body, "助手", "the page's explicit ?lang still wins")

	// The share page: the signed-in viewer's choice, else the browser's.
	_, body = e.get("/s/"+shareTok, zhBrowser, aliceCk)
	assert.Contains(t, body, `lang="en"`)
	assert.Contains(t, body, "Read-only share")
	assert.Contains(t, body, "Sources 1")
	_, body = e.get("/s/"+shareTok, enBrowser, bobCk)
	assert.Contains(t, body, `lang="zh-CN"`)
	assert.Contains(t, body, "只读分享")
	assert.Contains(t, body, "<summary>来源 1</summary>")
	_, body = e.get("/s/"+shareTok, zhBrowser)
	assert.Contains(t, body, "只读分享", "anonymous viewers get their browser's language")
	_, body = e.get("/s/"+shareTok, enBrowser)
	assert.Contains(t, body, "Read-only share")
	resp, body = e.get("/s/"+shareTok, enBrowser, &http.Cookie{Name: CookieName, Value: "expired-or-made-up"})
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a stale cookie is an anonymous viewer, not an error")
	assert.Contains(t, body, "Read-only share")
	_, body = e.get("/s/no-such-token", zhBrowser, aliceCk)
	assert.Contains(t, body, "Page not found", "the not-found page too")

	// The operator console, and the not-found page a non-operator gets there.
	resp, body = e.get("/operator", zhBrowser, olgaCk)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Contains(t, body, "Operator console")
	assert.NotContains(t, body, "运营控制台")
	_, body = e.get("/operator", zhBrowser, aliceCk)
	assert.Contains(t, body, "Page not found")

	// The websocket: the rendered answer and the rate-limit notice are in the user's language,
	// though the browser asks for Chinese.
	h := hdr("Authorization", "Bearer "+aliceTok, "Accept-Language", "zh-CN")
	ws, _, err := e.dialWS(h)
	require.NoError(t, err)
	ws.send(map[string]any{"type": "chat.send", "sessionId": sess.ID, "text": "报销流程"})
	frames := ws.until("run.finished")
	var html string
	for _, f := range frames {
		if f["type"] == "citations" {
			html, _ = f["html"].(string)
		}
	}
	assert.Contains(t, html, "<summary>Sources 1</summary>")
	assert.NotContains(t, html, "<summary>来源")
	// The limiter allows a burst of 5 at one per minute: the sixth send of this minute is refused.
	var refusal map[string]any
	for i := 0; i < 6 && refusal == nil; i++ {
		ws.send(map[string]any{"type": "chat.send", "text": "再问一次"})
		for _, f := range ws.untilAny("run.finished", "error") {
			if f["type"] == "error" {
				refusal = f
			}
		}
	}
	require.NotNil(t, refusal, "the sixth send is refused")
	assert.Equal(t, CodeRateLimited, refusal["code"])
	assert.Contains(t, refusal["message"], "too many messages")

	// Clearing the choice hands the decision back to the browser.
	_, err = e.st.SetLanguage(ctx, alice.ID, "")
	require.NoError(t, err)
	_, body = e.get("/", zhBrowser, aliceCk)
	assert.Contains(t, body, `<html lang="zh-CN" data-lang="zh">`)
	assert.Contains(t, body, `data-choice="" aria-pressed="true"`)
	_, body = e.get("/", enBrowser, aliceCk)
	assert.Contains(t, body, `<html lang="en" data-lang="en">`)
}

// TestSettingsUpdatedReachesTheUsersConnections: a change is announced to every open connection of
// the user (their other tabs switch too), and to nobody else.
func TestSettingsUpdatedReachesTheUsersConnections(t *testing.T) {
	e := newEnv(t)
	_, aliceTok := e.user("alice")
	_, bobTok := e.user("bob")
	a1, a2, b := e.mustWS(aliceTok), e.mustWS(aliceTok), e.mustWS(bobTok)

	code, body := e.putSettings(`{"language":"en"}`, hdr("Authorization", "Bearer "+aliceTok))
	require.Equal(t, http.StatusOK, code, body)
	for _, ws := range []*wsConn{a1, a2} {
		f := ws.next()
		assert.Equal(t, map[string]any{"type": "settings.updated", "language": "en"}, f)
	}
	// Setting what is already set announces nothing: the next frame alice's tabs get is the
	// following change.
	code, _ = e.putSettings(`{"language":"en"}`, hdr("Authorization", "Bearer "+aliceTok))
	require.Equal(t, http.StatusOK, code)
	code, _ = e.putSettings(`{"language":""}`, hdr("Authorization", "Bearer "+aliceTok))
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, map[string]any{"type": "settings.updated", "language": ""}, a1.next())

	// Bob's connection heard none of alice's changes: the first frame it gets is his own.
	code, _ = e.putSettings(`{"language":"zh"}`, hdr("Authorization", "Bearer "+bobTok))
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, map[string]any{"type": "settings.updated", "language": "zh"}, b.next())
}

// untilAny collects frames up to and including the first of any of the types.
func (w *wsConn) untilAny(types ...string) []map[string]any {
	w.t.Helper()
	var out []map[string]any
	for {
		f := w.next()
		out = append(out, f)
		for _, typ := range types {
			if f["type"] == typ {
				return out
			}
		}
	}
}

// langCookie is the LangCookieName cookie resp sets, or nil.
func langCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == LangCookieName {
			return c
		}
	}
	return nil
}

// TestSignInPageKeepsTheChosenLanguage: the language a user chose is remembered on the browser for
// the sign-in page that follows a sign-out (or an expired session), instead of the page falling back
// to the browser's language; "follow the browser" forgets it again. The cookie names a language and
// nothing else, and a forged value is ignored.
func TestSignInPageKeepsTheChosenLanguage(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.user("alice")
	zhBrowser := hdr("Accept-Language", "zh-CN,zh;q=0.9", "Origin", e.ts.URL)
	ck := e.webCookie(alice)

	code, body := e.putSettings(`{"language":"en"}`, zhBrowser, ck)
	require.Equal(t, http.StatusOK, code, body)
	// The PUT sets the cookie; so does any page load of a browser that lacks it.
	resp, _ := e.get("/", zhBrowser, ck)
	lc := langCookie(resp)
	require.NotNil(t, lc, "the app shell remembers the choice on this browser")
	assert.Equal(t, "en", lc.Value)
	assert.True(t, lc.HttpOnly)
	assert.Greater(t, lc.MaxAge, 300*24*3600)
	resp, _ = e.get("/", zhBrowser, ck, lc)
	assert.Nil(t, langCookie(resp), "a browser that has it is not told again")

	resp, _ = e.send("POST", "/logout", zhBrowser, ck, lc)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, page := e.get("/", zhBrowser, lc)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, page, `<html lang="en"`, "the sign-in page after sign-out speaks the user's language")
	resp, page = e.get("/", zhBrowser)
	assert.Contains(t, page, `<html lang="zh`, "without the cookie the browser decides, as before")
	resp, page = e.get("/", zhBrowser, &http.Cookie{Name: LangCookieName, Value: "<script>"})
	assert.Contains(t, page, `<html lang="zh`, "a forged value is ignored")

	// Back to "follow the browser": the cookie goes.
	ck = e.webCookie(alice)
	code, _ = e.putSettings(`{"language":""}`, zhBrowser, ck, lc)
	require.Equal(t, http.StatusOK, code)
	resp, _ = e.get("/api/me/settings", zhBrowser, ck, lc)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = e.send("POST", "/logout", zhBrowser, ck, lc)
	gone := langCookie(resp)
	require.NotNil(t, gone, "sign-out of a user who follows the browser removes the remembered language")
	assert.Less(t, gone.MaxAge, 0)
}

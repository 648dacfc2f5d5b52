package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/citegate/citegate/gateway/web"
	"github.com/citegate/citegate/store"
)

// CookieName is the browser session cookie. Its value is a web session token (store.CreateWebSession,
// store.RedeemLoginCode), never the user's long-lived access token.
const CookieName = "citegate_token"

// maxTokenLen bounds tokens before they reach the store (real ones are 43 characters).
const maxTokenLen = 256

// webSessionTTL is how long a browser stays logged in. A person who lets it lapse pastes the token
// again or asks for a login link (`citegate user login NAME`; a loopback `serve` prints one at start).
const webSessionTTL = 30 * 24 * time.Hour

// LoginPath is where login links point: GET /login?code=C exchanges the one-time code C for the
// session cookie.
const LoginPath = "/login"

// LoginURL is the login link for a one-time code on a server reachable at publicURL.
func LoginURL(publicURL, code string) string {
	return strings.TrimRight(publicURL, "/") + LoginPath + "?code=" + url.QueryEscape(code)
}

// tokenOf returns the request's token and whether it came from the cookie (which matters for the
// origin checks: only cookies are sent by browsers on their own).
func tokenOf(r *http.Request) (token string, fromCookie bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok), false
		}
		return "", false
	}
	if c, err := r.Cookie(CookieName); err == nil {
		return c.Value, true
	}
	return "", false
}

// authenticate resolves the request's user. A bearer token must be an access token; a cookie is a
// web session, or an access token (cookies set before login codes existed carried the token, and
// rotating the token ends those too). Unknown tokens are unauthorized; store failures are internal
// (a broken store must not look like a logout).
func (s *Server) authenticate(r *http.Request) (store.User, bool, error) {
	tok, fromCookie := tokenOf(r)
	if tok == "" || len(tok) > maxTokenLen {
		return store.User{}, false, errUnauthorized()
	}
	var u store.User
	var err error
	if fromCookie {
		u, err = s.st.UserBySession(r.Context(), tok)
		if errors.Is(err, store.ErrNotFound) {
			u, err = s.st.UserByToken(r.Context(), tok)
		}
	} else {
		u, err = s.st.UserByToken(r.Context(), tok)
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.User{}, false, errUnauthorized()
	}
	if err != nil {
		return store.User{}, false, s.storeErr("user_by_token", err)
	}
	return u, fromCookie, nil
}

// stateChanging reports whether the method may change something (the methods a CSRF check guards).
func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// errCrossOrigin is the answer to a cookie-authenticated state change from another origin.
func errCrossOrigin() *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeForbidden,
		Message: "cross-origin request refused: a browser session may change things only from this server's own pages (API clients use Authorization: Bearer)"}
}

// sameOrigin reports whether a browser request comes from our own pages. Browsers send Origin with
// every POST, PUT, PATCH and DELETE, but as "null" when the page's referrer policy is no-referrer
// (ours is), so: a real Origin decides on its own (it must be PublicURL's origin, an AllowedOrigins
// entry or the request's own host); otherwise the Fetch Metadata header Sec-Fetch-Site, which pages
// cannot set, must say same-origin. A request with neither is not trusted.
func (s *Server) sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		return s.originAllowed(r)
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// crossSiteForm reports whether a form post (login, logout) visibly comes from another site. Unlike
// sameOrigin it lets through requests that carry no origin information at all (curl, very old
// browsers): these forms need no cookie to be abused, and a missing header is no evidence of a
// foreign page. An opaque origin ("null") without Fetch Metadata is treated as foreign (a sandboxed
// frame).
func (s *Server) crossSiteForm(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o != "" && o != "null" {
		return !s.originAllowed(r)
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
		return o == "null"
	}
	return true
}

// api wraps an authenticated JSON handler. A state-changing request authenticated by the cookie must
// come from our own origin (DESIGN §5); bearer requests are not browsers acting on their own.
func (s *Server) api(h func(w http.ResponseWriter, r *http.Request, u store.User) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, fromCookie, err := s.authenticate(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if fromCookie && stateChanging(r.Method) && !s.sameOrigin(r) {
			s.log.WarnContext(r.Context(), "cross-origin cookie request refused", "method", r.Method, "path", r.URL.Path,
				"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
			s.writeError(w, r, errCrossOrigin())
			return
		}
		r = withUserLang(r, u)
		if err := h(w, r, u); err != nil {
			s.writeError(w, r, err)
		}
	}
}

func (s *Server) setCookie(w http.ResponseWriter, token string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    token,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   s.publicURL.Scheme == "https",
		SameSite: http.SameSiteStrictMode,
	})
}

// handleIndex serves the app shell to logged-in browsers and the login form to everyone else. A
// long-lived token in the query (`/?token=`, the old login links) logs nobody in: tokens do not
// travel in URLs, and a link that logs the visitor in as its maker is a login CSRF.
func (s *Server) handleIndex(w http.ResponseWriter, r *http.Request) {
	lang := loginLang(r)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if r.URL.Query().Has("token") {
		s.renderLogin(w, r, http.StatusOK, loginMsg(lang, "token_link"))
		return
	}
	u, _, err := s.authenticate(r)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code != CodeUnauthorized {
			s.writeError(w, r, err)
			return
		}
		s.renderLogin(w, r, http.StatusOK, "")
		return
	}
	// From here on the page is the user's: in the language they chose, for anything rendered below.
	r = withUserLang(r, u)
	lang = langOf(r)
	s.rememberLang(w, r, u.Language)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := web.RenderIndex(w, web.IndexData{Lang: lang, Language: u.Language, UserName: u.Name, ModelName: s.ag.ModelName(), Operator: u.Operator, First: s.firstPage(r.Context(), r, u, lang)}); err != nil {
		s.log.WarnContext(r.Context(), "render index", "err", err)
	}
}

// handleLogin is the token form: a person pastes their access token and gets a browser session.
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	if s.crossSiteForm(r) {
		s.renderLogin(w, r, http.StatusForbidden, loginMsg(loginLang(r), "cross_site"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		s.renderLogin(w, r, http.StatusBadRequest, loginMsg(loginLang(r), "bad"))
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	if tok == "" || len(tok) > maxTokenLen {
		s.renderLogin(w, r, http.StatusUnauthorized, loginMsg(loginLang(r), "invalid"))
		return
	}
	u, err := s.st.UserByToken(r.Context(), tok)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.storeErr("user_by_token", err)
			s.renderLogin(w, r, http.StatusInternalServerError, loginMsg(loginLang(r), "internal"))
			return
		}
		s.renderLogin(w, r, http.StatusUnauthorized, loginMsg(loginLang(r), "invalid"))
		return
	}
	sess, err := s.st.CreateWebSession(r.Context(), u.ID, webSessionTTL)
	if err != nil {
		s.storeErr("create_web_session", err)
		s.renderLogin(w, r, http.StatusInternalServerError, loginMsg(loginLang(r), "internal"))
		return
	}
	s.setCookie(w, sess, int(webSessionTTL/time.Second))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// handleLoginCode exchanges a one-time login code (GET /login?code=C) for the session cookie, then
// sends the browser on to "/" so the code leaves the address bar. The code is spent in the same
// store transaction that creates the session: a second use, or a use after expiry, logs nobody in.
//
// The way on is a page with a meta refresh rather than a 303: a SameSite=Strict cookie is not sent on
// a redirect chain that began on another site (a link clicked in webmail or a chat app running in
// the browser), so a 303 would land on the login form; the refresh is a navigation our own page
// starts, which carries the cookie.
func (s *Server) handleLoginCode(w http.ResponseWriter, r *http.Request) {
	lang := loginLang(r)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	code := r.URL.Query().Get("code")
	if code == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	// Only a top-level navigation may spend a code: an image or fetch from another page (which could
	// log the visitor in as the attacker who made the code) is refused before the code is touched.
	if m := r.Header.Get("Sec-Fetch-Mode"); m != "" && m != "navigate" {
		s.renderLogin(w, r, http.StatusForbidden, loginMsg(lang, "cross_site"))
		return
	}
	if len(code) > maxTokenLen {
		s.renderLogin(w, r, http.StatusUnauthorized, loginMsg(lang, "code"))
		return
	}
	u, sess, err := s.st.RedeemLoginCode(r.Context(), code, webSessionTTL)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			s.renderLogin(w, r, http.StatusUnauthorized, loginMsg(lang, "code"))
			return
		}
		s.storeErr("redeem_login_code", err)
		s.renderLogin(w, r, http.StatusInternalServerError, loginMsg(lang, "internal"))
		return
	}
	s.log.InfoContext(r.Context(), "browser logged in with a login link", "user", u.ID)
	s.setCookie(w, sess, int(webSessionTTL/time.Second))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, continuePage)
}

// continuePage moves a freshly logged-in browser to the app (see handleLoginCode). No script: the
// page works with JavaScript off, and the link is there should the refresh be blocked.
const continuePage = `<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/"><title>citegate</title></head>
<body><p><a href="/">继续 / Continue</a></p></body></html>
`

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	if s.crossSiteForm(r) {
		s.writeError(w, r, errCrossOrigin())
		return
	}
	if u, _, err := s.authenticate(r); err == nil {
		// The sign-in page that follows speaks the language the user chose.
		s.rememberLang(w, r, u.Language)
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" && len(c.Value) <= maxTokenLen {
		if err := s.st.DeleteSession(r.Context(), c.Value); err != nil {
			s.storeErr("delete_web_session", err)
		}
	}
	s.setCookie(w, "", -1)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := web.RenderLogin(w, web.LoginData{Lang: loginLang(r), Error: msg}); err != nil {
		s.log.WarnContext(r.Context(), "render login", "err", err)
	}
}

func loginMsg(lang, kind string) string {
	en := lang == "en"
	switch kind {
	case "invalid":
		if en {
			return "This access token is not valid. Ask the administrator for a login link (`citegate user login NAME`) or a new token (`citegate user token NAME`)."
		}
		return "访问令牌无效。请管理员用 `citegate user login 名字` 生成登录链接，或用 `citegate user token 名字` 生成新令牌。"
	case "code":
		if en {
			return "This login link has expired or was already used. Ask for a new one (`citegate user login NAME`) or paste your access token."
		}
		return "登录链接已过期或已被使用。请用 `citegate user login 名字` 获取新链接，或粘贴访问令牌登录。"
	case "token_link":
		if en {
			return "Links carrying an access token no longer log in. Paste the token below, or ask for a one-time login link (`citegate user login NAME`)."
		}
		return "带访问令牌的链接不再用于登录。请在下方粘贴令牌，或用 `citegate user login 名字` 获取一次性登录链接。"
	case "cross_site":
		if en {
			return "Sign-in requests from other sites are refused. Open this page directly."
		}
		return "拒绝来自其他网站的登录请求。请直接打开本页面。"
	case "bad":
		if en {
			return "The login form could not be read."
		}
		return "无法读取登录表单。"
	default:
		if en {
			return "The server could not check the token right now; try again."
		}
		return "服务器暂时无法校验令牌，请稍后再试。"
	}
}

// LoginLink creates a one-time login link (valid store.MaxLoginCodeTTL) for the named user.
func (s *Server) LoginLink(ctx context.Context, name string) (string, time.Time, error) {
	u, err := s.st.UserByName(ctx, name)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("gateway: login link: %w", err)
	}
	code, exp, err := s.st.CreateLoginCode(ctx, u.ID, store.MaxLoginCodeTTL)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("gateway: login link for %q: %w", u.Name, err)
	}
	return LoginURL(s.cfg.PublicURL, code), exp, nil
}

// EnsureLocalUser makes a loopback install usable at once and returns the startup login link: when
// Addr is a loopback address and the store has no user yet, it creates the user "local"; when the
// user "local" exists and is not revoked, it returns a fresh one-time login link for it. Otherwise
// (not loopback, no such user, or revoked) it returns "".
func (s *Server) EnsureLocalUser(ctx context.Context) (string, error) {
	if !isLoopbackAddr(s.cfg.Addr) {
		return "", nil
	}
	n, err := s.st.CountUsers(ctx)
	if err != nil {
		return "", fmt.Errorf("gateway: count users: %w", err)
	}
	if n == 0 {
		if _, _, err := s.st.CreateUser(ctx, "local"); err != nil && !errors.Is(err, store.ErrConflict) {
			return "", fmt.Errorf("gateway: create local user: %w", err)
		}
	}
	link, _, err := s.LoginLink(ctx, "local")
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrRevoked) {
		return "", nil
	}
	return link, err
}

func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// originAllowed reports whether a request's Origin is one of our own: PublicURL's origin, an
// AllowedOrigins entry, or the request's own Host.
func (s *Server) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	if s.origins[strings.ToLower(u.Scheme+"://"+u.Host)] {
		return true
	}
	return strings.EqualFold(u.Host, r.Host)
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/citegate/citegate/gateway/web"
	"github.com/citegate/citegate/store"
)

// CookieName is the browser session cookie; its value is the user's access token.
const CookieName = "citegate_token"

// maxTokenLen bounds tokens before they reach the store (real ones are 43 characters).
const maxTokenLen = 256

// tokenOf returns the request's token and whether it came from the cookie (which matters for the
// websocket Origin check: only cookies are sent by browsers on their own).
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

// authenticate resolves the request's user. Unknown tokens are unauthorized; store failures are
// internal (a broken store must not look like a logout).
func (s *Server) authenticate(r *http.Request) (store.User, bool, error) {
	tok, fromCookie := tokenOf(r)
	if tok == "" || len(tok) > maxTokenLen {
		return store.User{}, false, errUnauthorized()
	}
	u, err := s.st.UserByToken(r.Context(), tok)
	if errors.Is(err, store.ErrNotFound) {
		return store.User{}, false, errUnauthorized()
	}
	if err != nil {
		return store.User{}, false, s.storeErr("user_by_token", err)
	}
	return u, fromCookie, nil
}

// api wraps an authenticated JSON handler.
func (s *Server) api(h func(w http.ResponseWriter, r *http.Request, u store.User) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, _, err := s.authenticate(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
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

// handleIndex serves the app shell to logged-in browsers and the login form to everyone else.
// GET /?token=T logs in with T and redirects to a clean URL so the token leaves the address bar.
func (s *Server) handleIndex(w http.ResponseWriter, r *http.Request) {
	lang := langOf(r)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if tok := r.URL.Query().Get("token"); tok != "" {
		s.login(w, r, tok)
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
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := web.RenderIndex(w, web.IndexData{Lang: lang, UserName: u.Name, ModelName: s.ag.ModelName()}); err != nil {
		s.log.WarnContext(r.Context(), "render index", "err", err)
	}
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		s.renderLogin(w, r, http.StatusBadRequest, loginMsg(langOf(r), "bad"))
		return
	}
	s.login(w, r, strings.TrimSpace(r.PostForm.Get("token")))
}

func (s *Server) login(w http.ResponseWriter, r *http.Request, tok string) {
	if tok == "" || len(tok) > maxTokenLen {
		s.renderLogin(w, r, http.StatusUnauthorized, loginMsg(langOf(r), "invalid"))
		return
	}
	if _, err := s.st.UserByToken(r.Context(), tok); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.storeErr("user_by_token", err)
			s.renderLogin(w, r, http.StatusInternalServerError, loginMsg(langOf(r), "internal"))
			return
		}
		s.renderLogin(w, r, http.StatusUnauthorized, loginMsg(langOf(r), "invalid"))
		return
	}
	s.setCookie(w, tok, 400*24*3600)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	s.setCookie(w, "", -1)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := web.RenderLogin(w, web.LoginData{Lang: langOf(r), Error: msg}); err != nil {
		s.log.WarnContext(r.Context(), "render login", "err", err)
	}
}

func loginMsg(lang, kind string) string {
	en := lang == "en"
	switch kind {
	case "invalid":
		if en {
			return "This access token is not valid. Ask for a new one with `citegate user add NAME`."
		}
		return "访问令牌无效。请用 `citegate user add 名字` 生成新的令牌。"
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

// EnsureLocalUser makes a fresh loopback install usable at once: when Addr is a loopback address and
// the store has no user yet, it creates the user "local" and returns a login URL carrying its token.
// Otherwise it returns "".
func (s *Server) EnsureLocalUser(ctx context.Context) (string, error) {
	if !isLoopbackAddr(s.cfg.Addr) {
		return "", nil
	}
	n, err := s.st.CountUsers(ctx)
	if err != nil {
		return "", fmt.Errorf("gateway: count users: %w", err)
	}
	if n > 0 {
		return "", nil
	}
	_, tok, err := s.st.CreateUser(ctx, "local")
	if err != nil {
		return "", fmt.Errorf("gateway: create local user: %w", err)
	}
	return s.cfg.PublicURL + "/?token=" + url.QueryEscape(tok), nil
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

// originAllowed reports whether a cookie-authenticated websocket upgrade comes from our own pages:
// the Origin must be PublicURL's origin, an AllowedOrigins entry, or the request's own Host.
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

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/citegate/citegate/store"
)

// Per-user interface language (issue 10, point 8). A signed-in user may choose Chinese or English;
// the choice is stored with the user (store.SetLanguage), so it follows the user to every browser
// and device, and every page, API answer and websocket frame rendered for the user is in that
// language. Without a choice, and for visitors who are not signed in, the browser's
// Accept-Language decides as before (langOf).

// maxSettingsBody bounds PUT /api/me/settings: one short JSON object.
const maxSettingsBody = 1 << 10

// langKey carries a signed-in user's language choice in a request's context (see withUserLang).
type langKey struct{}

// withUserLang returns r carrying u's language choice, so that langOf, which every handler already
// asks for the language of what it renders, answers with the user's choice instead of the
// browser's. The authenticated wrappers (api, operator) apply it once for all their handlers.
func withUserLang(r *http.Request, u store.User) *http.Request {
	if u.Language == "" {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), langKey{}, u.Language))
}

// chosenLang is the language a user chose that r carries, or "" (follow the browser).
func chosenLang(r *http.Request) string {
	l, _ := r.Context().Value(langKey{}).(string)
	return l
}

// userLang is the language of what is rendered for u: the user's choice, else the browser's.
func userLang(r *http.Request, u store.User) string {
	if u.Language != "" {
		return u.Language
	}
	return langOf(r)
}

// viewerLang is the language of a page anyone may open (a share page): the viewer's own choice when
// the request is signed in, else the browser's. A request whose credentials cannot be resolved (none,
// expired, or a store failure) is simply an anonymous viewer here: the page does not depend on who
// looks at it, only its language does.
func (s *Server) viewerLang(r *http.Request) string {
	if tok, _ := tokenOf(r); tok == "" {
		return langOf(r)
	}
	u, _, err := s.authenticate(r)
	if err != nil {
		return langOf(r)
	}
	return userLang(r, u)
}

// LangCookieName is the cookie that remembers, on one browser, the language its last signed-in
// user chose, so that the sign-in page after a sign-out (or an expired session) speaks it too. It
// names a language and nothing else; it is no credential and no one's identity.
const LangCookieName = "citegate_lang"

// loginLang is the language of the sign-in pages: the language this browser's last user chose
// (LangCookieName), else the browser's.
func loginLang(r *http.Request) string {
	if c, err := r.Cookie(LangCookieName); err == nil && (c.Value == store.LangZH || c.Value == store.LangEN) {
		return c.Value
	}
	return langOf(r)
}

// rememberLang keeps u's choice in LangCookieName for the sign-in page, or removes the cookie when
// u follows the browser. It writes only when the browser's cookie says something else.
func (s *Server) rememberLang(w http.ResponseWriter, r *http.Request, lang string) {
	old := ""
	if c, err := r.Cookie(LangCookieName); err == nil {
		old = c.Value
	}
	if old == lang {
		return
	}
	c := &http.Cookie{Name: LangCookieName, Value: lang, Path: "/", MaxAge: 400 * 24 * 3600, HttpOnly: true,
		Secure: s.publicURL.Scheme == "https", SameSite: http.SameSiteLaxMode}
	if lang == "" {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// settingsRoutes registers the user's settings API.
func (s *Server) settingsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/me/settings", s.api(s.handleGetSettings))
	mux.HandleFunc("PUT /api/me/settings", s.api(s.handlePutSettings))
}

// settingsJSON is the body of GET and PUT /api/me/settings. Language is the stored choice ("zh",
// "en", or "" to follow the browser); EffectiveLanguage is the language this request's pages are
// rendered in (the choice, else the one the browser's Accept-Language picks).
type settingsJSON struct {
	Language          string   `json:"language"`
	EffectiveLanguage string   `json:"effectiveLanguage"`
	Languages         []string `json:"languages"`
}

func settingsOf(r *http.Request, u store.User) settingsJSON {
	return settingsJSON{Language: u.Language, EffectiveLanguage: userLang(r, u), Languages: []string{store.LangZH, store.LangEN}}
}

// handleGetSettings is GET /api/me/settings.
func (s *Server) handleGetSettings(w http.ResponseWriter, r *http.Request, u store.User) error {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, settingsOf(r, u))
	return nil
}

// handlePutSettings is PUT /api/me/settings {"language":"zh"|"en"|""}. The field is required (an
// empty body is more likely a client bug than a wish to reset); anything but the three values is a
// 400 naming them, and nothing is stored. The user's open websocket connections are told with a
// settings.updated frame so that the user's other tabs and devices switch too.
func (s *Server) handlePutSettings(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req struct {
		Language *string `json:"language"`
	}
	if err := decodeBody(w, r, maxSettingsBody, &req); err != nil {
		return err
	}
	if req.Language == nil {
		return errBadRequest(`language is required: "zh", "en", or "" to follow the browser`)
	}
	if err := store.CheckLanguage(*req.Language); err != nil {
		return errBadRequest(`language must be "zh", "en", or "" to follow the browser`)
	}
	changed := *req.Language != u.Language
	nu, err := s.st.SetLanguage(r.Context(), u.ID, *req.Language)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			// The user was removed between authentication and the update.
			return errUnauthorized()
		}
		return s.storeErr("set_language", err)
	}
	if changed {
		s.log.InfoContext(r.Context(), "interface language changed", "user", u.ID, "language", nu.Language)
		s.notifySettings(nu)
	}
	s.rememberLang(w, r, nu.Language)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, settingsOf(r, nu))
	return nil
}

// settingsFrame is the settings.updated websocket frame: the user's stored language choice ("" =
// follow the browser), sent to every connection of the user after it changed.
type settingsFrame struct {
	Type     string `json:"type"`
	Language string `json:"language"`
}

// notifySettings tells the user's open connections about a changed setting, here and, through the
// bus, on every other replica (bus_user.go); each page re-renders itself in the new language. A
// connection that misses the frame picks the choice up when it next loads a page, since every
// request reads the user afresh.
func (s *Server) notifySettings(u store.User) {
	data, err := json.Marshal(settingsFrame{Type: "settings.updated", Language: u.Language})
	if err != nil {
		s.log.Error("encode settings frame", "err", err)
		return
	}
	s.hub.toUserRaw(u.ID, data)
	if s.bus.Shared() {
		s.bus.PublishUserFrame(u.ID, data)
	}
}

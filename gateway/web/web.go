// Package web holds the desktop view's embedded assets (the scripts core.js … start.js, app.css) and the server-rendered
// pages (app shell, login, read-only share page, 404). There is no build step: the files under
// static/ and templates/ are what browsers get. Message HTML comes from citations/markdown and is
// already sanitised; the templates only place it.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static templates
var files embed.FS

// MessageView is one message placed on a server-rendered page.
type MessageView struct {
	ID   uint64
	Role string // "USER" or "ASSISTANT"
	// HTML is the sanitised output of markdown.Render / markdown.RenderPlain.
	HTML      template.HTML
	CreatedAt time.Time
}

// ShareData fills the read-only share page.
type ShareData struct {
	Title, Lang, ExportURL string
	CreatedAt              time.Time
	Messages               []MessageView
}

// LoginData fills the login page; Error is shown above the form when set.
type LoginData struct{ Lang, Error string }

// IndexData fills the desktop app shell. Operator adds the link to the operator console.
type IndexData struct {
	Lang, UserName, ModelName string
	Operator                  bool
	// Language is the user's stored interface-language choice ("zh", "en", or "" to follow the
	// browser); the language switcher shows it selected.
	Language string
}

// asset is one embedded static file with its precomputed validator.
type asset struct {
	body        []byte
	etag        string
	contentType string
}

var (
	assets       map[string]asset
	assetVersion string // short hash of every asset; busts browser caches on upgrade
	tmpl         *template.Template
	initErr      error
)

func init() {
	// Embedded files are fixed at build time, so failures here are programming errors that the
	// package's tests catch; they are kept in initErr rather than panicking a library.
	assets, assetVersion, initErr = loadAssets()
	if initErr == nil {
		tmpl, initErr = template.New("").Funcs(template.FuncMap{
			"t":        translate,
			"htmlLang": htmlLang,
			"fmtTime":  fmtTime,
			"isUser":   func(role string) bool { return role == "USER" },
			"shareMsg": func(lang string, m MessageView) shareMsg { return shareMsg{Lang: lang, M: m} },
			"v":        func() string { return assetVersion },
		}).ParseFS(files, "templates/*.html")
	}
}

func loadAssets() (map[string]asset, string, error) {
	out := map[string]asset{}
	all := sha256.New()
	err := fs.WalkDir(files, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		all.Write(sum[:])
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out[strings.TrimPrefix(p, "static/")] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, contentType: ct}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("web: load assets: %w", err)
	}
	return out, hex.EncodeToString(all.Sum(nil)[:6]), nil
}

// Assets serves the embedded static files by name ("core.js", "app.css"). Requests carrying the
// current version (?v=…, as the templates write them) may be cached for a year; others revalidate
// with the ETag.
func Assets() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		a, ok := assets[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		if r.URL.Query().Get("v") == assetVersion {
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}

// AssetVersion identifies the embedded assets' content.
func AssetVersion() string { return assetVersion }

// RenderIndex writes the desktop app shell.
func RenderIndex(w io.Writer, d IndexData) error {
	d.Lang = normLang(d.Lang)
	return render(w, "index.html", d)
}

// RenderLogin writes the token form (POST /login, field "token"); it works without JavaScript.
func RenderLogin(w io.Writer, d LoginData) error {
	d.Lang = normLang(d.Lang)
	return render(w, "login.html", d)
}

// RenderShare writes a read-only share page: no script, noindex, the conversation only.
func RenderShare(w io.Writer, d ShareData) error {
	d.Lang = normLang(d.Lang)
	return render(w, "share.html", d)
}

// RenderNotFound writes the page shown for unknown and revoked shares alike.
func RenderNotFound(w io.Writer, lang string) error {
	return render(w, "notfound.html", struct{ Lang string }{normLang(lang)})
}

func render(w io.Writer, name string, data any) error {
	if initErr != nil {
		return initErr
	}
	// Render into a buffer first so a template error never leaves half a page behind.
	var buf bytes.Buffer
	if err := tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		return fmt.Errorf("web: render %s: %w", name, err)
	}
	if _, err := buf.WriteTo(w); err != nil {
		return fmt.Errorf("web: write %s: %w", name, err)
	}
	return nil
}

// normLang reduces a language tag to the two the pages speak.
func normLang(lang string) string {
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(lang)), "en") {
		return "en"
	}
	return "zh"
}

func htmlLang(lang string) string {
	if lang == "en" {
		return "en"
	}
	return "zh-CN"
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

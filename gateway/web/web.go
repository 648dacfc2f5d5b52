// Package web holds the desktop view's embedded assets (the scripts core.js … start.js, app.css) and the server-rendered
// pages (app shell, login, read-only share page, 404). There is no build step: the files under
// static/ and templates/ are what browsers get. Message HTML comes from citations/markdown and is
// already sanitised; the templates only place it.
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
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

// IndexData fills the desktop app shell. Operator adds the link to the operator console. First,
// when set, is the chat the address names, rendered into the shell.
type IndexData struct {
	Lang, UserName, ModelName string
	Operator                  bool
	// Language is the user's stored interface-language choice ("zh", "en", or "" to follow the
	// browser); the language switcher shows it selected.
	Language string
	First    *FirstPage
}

// FirstPage is the newest page of the chat the address names (/?s=<id>), placed in the app shell
// so the chat is on screen and readable before any script runs. Messages hold the same sanitised
// HTML the websocket's session.history carries; Frame is that session.history frame as JSON,
// without the messages' html (the articles hold it), from which the scripts take the page over.
type FirstPage struct {
	SessionID, Title string
	Messages         []MessageView
	Frame            template.JS
}

// asset is one embedded static file with its precomputed validator, and for text files its gzip
// form (compressed once at start-up; nil when compressing does not pay).
type asset struct {
	body        []byte
	etag        string
	contentType string
	gz          []byte
}

// firstScroll runs inline right after a chat the server rendered into the app shell, before the
// first paint, so the reader sees the chat's end (where a conversation goes on) rather than the
// oldest message of its newest page. Inline, because a script file there waits for its fetch in
// the queue behind the deferred ones while it holds the parser; the page's CSP allows exactly this
// text by its hash (FirstScrollHash), no other inline script.
const firstScroll = `(function(){var m=document.getElementById('messages');if(m)m.scrollTop=m.scrollHeight;})();`

// firstScrollHash is the CSP source expression that allows firstScroll.
var firstScrollHash = func() string {
	sum := sha256.Sum256([]byte(firstScroll))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

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
			"opMsg":    func(lang string, m OperatorMessage) opMsg { return opMsg{Lang: lang, M: m} },
			"v":        func() string { return assetVersion },
			// The inline scroll script and the CSP source that allows it (see firstScroll).
			"firstScroll":     func() template.JS { return template.JS(firstScroll) }, // #nosec G203 -- a constant
			"firstScrollHash": func() string { return firstScrollHash },
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
		a := asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, contentType: ct}
		if a.gz, err = gzipText(ct, b); err != nil {
			return err
		}
		out[strings.TrimPrefix(p, "static/")] = a
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
		h.Set("X-Content-Type-Options", "nosniff")
		if r.URL.Query().Get("v") == assetVersion {
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		body, etag := a.body, a.etag
		if a.gz != nil {
			h.Set("Vary", "Accept-Encoding")
			if acceptsGzip(r) {
				// The compressed bytes are another representation: their own validator.
				body, etag = a.gz, strings.TrimSuffix(a.etag, `"`)+`-gz"`
				h.Set("Content-Encoding", "gzip")
			}
		}
		h.Set("ETag", etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	})
}

// gzipText compresses a text asset (scripts, styles, SVG); other types, and texts that do not
// shrink by at least a tenth, stay as they are (nil).
func gzipText(contentType string, b []byte) ([]byte, error) {
	if !strings.HasPrefix(contentType, "text/") && !strings.Contains(contentType, "javascript") && !strings.Contains(contentType, "svg") {
		return nil, nil
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, fmt.Errorf("web: gzip: %w", err)
	}
	if _, err := zw.Write(b); err != nil {
		return nil, fmt.Errorf("web: gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("web: gzip: %w", err)
	}
	if buf.Len() > len(b)*9/10 {
		return nil, nil
	}
	return buf.Bytes(), nil
}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip (and does not refuse it
// with q=0).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
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

package web

import (
	"bytes"
	"compress/gzip"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInit(t *testing.T) {
	require.NoError(t, initErr)
	require.Len(t, assetVersion, 12)
	for _, name := range []string{"core.js", "render.js", "start.js", "app.css"} {
		require.Contains(t, assets, name)
	}
}

func TestAssets(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("/assets/", Assets()))
	defer srv.Close()
	tests := []struct {
		path, ctype, cache string
		status             int
	}{
		{"/assets/core.js", "text/javascript; charset=utf-8", "no-cache", 200},
		{"/assets/app.css?v=" + AssetVersion(), "text/css; charset=utf-8", "public, max-age=31536000, immutable", 200},
		{"/assets/render.js?v=stale", "text/javascript; charset=utf-8", "no-cache", 200},
		{"/assets/missing.js", "", "", 404},
		{"/assets/../web.go", "", "", 404},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			res, err := http.Get(srv.URL + tc.path)
			require.NoError(t, err)
			defer res.Body.Close()
			require.Equal(t, tc.status, res.StatusCode)
			if tc.status != 200 {
				return
			}
			assert.Equal(t, tc.ctype, res.Header.Get("Content-Type"))
			assert.Equal(t, tc.cache, res.Header.Get("Cache-Control"))
			assert.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))

			// The ETag revalidates.
			req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
			req.Header.Set("If-None-Match", res.Header.Get("ETag"))
			res2, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			res2.Body.Close()
			assert.Equal(t, http.StatusNotModified, res2.StatusCode)
		})
	}
	res, err := http.Post(srv.URL+"/assets/core.js", "text/plain", nil)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
}

// TestScriptsSmall keeps every desktop script small, free of dependencies and of the one sink that
// could turn streamed model text into markup, and checks that index.html loads each of them.
func TestScriptsSmall(t *testing.T) {
	// With a chat rendered in (First), as a reload of /?s=<id> gets it.
	page := renderTo(t, func(b *bytes.Buffer) error {
		return RenderIndex(b, IndexData{Lang: "zh", First: &FirstPage{SessionID: "s1", Frame: `{"type":"session.history"}`}})
	})
	n := 0
	for name, a := range assets {
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		n++
		js := string(a.body)
		lines := strings.Count(js, "\n")
		assert.Less(t, lines, 400, "%s should stay under 400 lines: split it by job", name)
		assert.NotContains(t, js, "import ", name)
		assert.NotContains(t, js, "eval(", name)
		assert.NotContains(t, js, "document.write", name)
		// innerHTML is assigned only from server-rendered html fields: a message's or a frame's html,
		// and the preview's excerptHtml (markdown.RenderExcerpt, sanitised on the server).
		for _, m := range regexp.MustCompile(`innerHTML\s*=\s*([^;]+);`).FindAllStringSubmatch(js, -1) {
			assert.Contains(t, []string{"m.html", "f.html", "p.excerptHtml"}, strings.TrimSpace(m[1]), name)
		}
		mode := ` defer`
		switch name {
		case "boot.js":
			mode = ` async` // it only opens the websocket early; see boot.js
		}
		assert.Contains(t, page, `<script src="/assets/`+name+`?v=`+AssetVersion()+`"`+mode+`></script>`, "index.html loads %s", name)
	}
	// boot.js touches no page element and runs before every other script.
	assert.Less(t, strings.Index(page, "/assets/boot.js"), strings.Index(page, "/assets/core.js"))
	assert.NotContains(t, string(assets["boot.js"].body), "getElementById")
	assert.GreaterOrEqual(t, n, 7)
	// core.js defines the namespace every other script uses, and start.js connects: first and last
	// of the shell's own files.
	assert.Less(t, strings.Index(page, "/assets/core.js"), strings.Index(page, "/assets/render.js"))
	assert.Less(t, strings.Index(page, "/assets/share.js"), strings.Index(page, "/assets/start.js"))
}

func renderTo(t *testing.T, fn func(*bytes.Buffer) error) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, fn(&buf))
	return buf.String()
}

func TestRenderIndex(t *testing.T) {
	tests := []struct {
		lang, htmlLang, label string
	}{
		{"zh", "zh-CN", "新对话"},
		{"", "zh-CN", "新对话"},
		{"en-US", "en", "New chat"},
	}
	for _, tc := range tests {
		out := renderTo(t, func(b *bytes.Buffer) error {
			return RenderIndex(b, IndexData{Lang: tc.lang, UserName: `<b>eve</b>`, ModelName: "extractive"})
		})
		assert.Contains(t, out, `<html lang="`+tc.htmlLang+`"`)
		assert.Contains(t, out, tc.label)
		assert.Contains(t, out, `/assets/core.js?v=`+AssetVersion())
		assert.Contains(t, out, `/assets/app.css?v=`+AssetVersion())
		assert.Contains(t, out, "&lt;b&gt;eve&lt;/b&gt;", "user names are escaped")
		assert.NotContains(t, out, "<b>eve")
		assert.Contains(t, out, `script-src 'self'`)
		for _, id := range []string{"sessions", "messages", "composer", "input", "send", "cancel", "new-chat", "share-btn", "excerpt"} {
			assert.Contains(t, out, `id="`+id+`"`)
		}
	}
}

func TestRenderLogin(t *testing.T) {
	out := renderTo(t, func(b *bytes.Buffer) error { return RenderLogin(b, LoginData{Lang: "zh", Error: `bad <token>`}) })
	assert.Contains(t, out, `<form method="post" action="/login"`)
	assert.Contains(t, out, `name="token"`)
	assert.Contains(t, out, `role="alert">bad &lt;token&gt;</p>`)
	assert.NotContains(t, out, "<script")

	out = renderTo(t, func(b *bytes.Buffer) error { return RenderLogin(b, LoginData{Lang: "en"}) })
	assert.NotContains(t, out, `role="alert"`)
	assert.Contains(t, out, "Sign in")
}

func TestRenderShare(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	d := ShareData{
		Title: `发票 <script>`, Lang: "zh", ExportURL: "/s/tok/export.jsonl", CreatedAt: at,
		Messages: []MessageView{
			{ID: 1, Role: "USER", HTML: template.HTML(`<p class="plain">问题</p>`), CreatedAt: at},
			{ID: 2, Role: "ASSISTANT", HTML: template.HTML(`<p>答<sup class="cite-ref"><a href="#m2-src-1">1</a></sup></p>`), CreatedAt: at},
		},
	}
	out := renderTo(t, func(b *bytes.Buffer) error { return RenderShare(b, d) })
	assert.Contains(t, out, `<meta name="robots" content="noindex, nofollow">`)
	assert.Contains(t, out, `script-src 'none'`)
	assert.NotContains(t, out, "<script", "share pages carry no script, not even from the title")
	assert.Contains(t, out, "发票 &lt;script&gt;")
	assert.Contains(t, out, `href="/s/tok/export.jsonl" download`)
	assert.Contains(t, out, `<article class="msg user" id="msg-1" data-id="1">`)
	assert.Contains(t, out, `<article class="msg assistant" id="msg-2" data-id="2">`)
	assert.Contains(t, out, `<sup class="cite-ref">`, "message HTML is placed as is")
	assert.Contains(t, out, ">用户<")
	assert.Contains(t, out, ">助手<")
	assert.Contains(t, out, "2026-11-30 03:04 UTC")

	empty := renderTo(t, func(b *bytes.Buffer) error {
		return RenderShare(b, ShareData{Lang: "en", ExportURL: "/s/x/export.jsonl"})
	})
	assert.Contains(t, empty, "This conversation has no messages yet.")
}

func TestRenderNotFound(t *testing.T) {
	zh := renderTo(t, func(b *bytes.Buffer) error { return RenderNotFound(b, "zh") })
	en := renderTo(t, func(b *bytes.Buffer) error { return RenderNotFound(b, "en") })
	assert.Contains(t, zh, "已被撤销")
	assert.Contains(t, en, "revoked")
	assert.Contains(t, en, `<meta name="robots" content="noindex">`)
}

// TestTextsComplete: every key used by a template exists in both languages.
func TestTextsComplete(t *testing.T) {
	keyRE := regexp.MustCompile(`\{\{t [$.]*Lang "([^"]+)"\}\}`)
	err := fs.WalkDir(files, "templates", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		require.NoError(t, err)
		for _, m := range keyRE.FindAllStringSubmatch(string(b), -1) {
			for lang := range texts {
				assert.Contains(t, texts[lang], m[1], "%s: key %q missing in %s", p, m[1], lang)
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, len(texts["zh"]), len(texts["en"]))
	assert.Equal(t, "role.NOPE", translate("en", "role.NOPE"))
}

func TestNormLang(t *testing.T) {
	for in, want := range map[string]string{"": "zh", "zh-CN": "zh", "EN": "en", "en-GB": "en", "fr": "zh"} {
		assert.Equal(t, want, normLang(in), in)
	}
}

// TestAssetsGzip: text assets go compressed to a client that accepts gzip (their own ETag, which
// revalidates), as they are to one that does not or refuses it; the bytes are the same file.
func TestAssetsGzip(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("/assets/", Assets()))
	defer srv.Close()
	// A transport that leaves Content-Encoding to the test instead of decoding it silently.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func(path, accept, inm string) (*http.Response, []byte) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if accept != "" {
			req.Header.Set("Accept-Encoding", accept)
		}
		if inm != "" {
			req.Header.Set("If-None-Match", inm)
		}
		res, err := client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, b
	}
	for _, name := range []string{"core.js", "app.css"} {
		plain := assets[name].body
		res, b := get("/assets/"+name, "gzip, deflate, br", "")
		require.Equal(t, http.StatusOK, res.StatusCode)
		assert.Equal(t, "gzip", res.Header.Get("Content-Encoding"), name)
		assert.Equal(t, "Accept-Encoding", res.Header.Get("Vary"))
		assert.Less(t, len(b), len(plain)/2, "%s compresses", name)
		zr, err := gzip.NewReader(bytes.NewReader(b))
		require.NoError(t, err)
		un, err := io.ReadAll(zr)
		require.NoError(t, err)
		assert.Equal(t, plain, un, name)
		etag := res.Header.Get("ETag")
		assert.NotEqual(t, assets[name].etag, etag, "the compressed form has its own validator")
		res, _ = get("/assets/"+name, "gzip", etag)
		assert.Equal(t, http.StatusNotModified, res.StatusCode)

		for _, accept := range []string{"", "identity", "gzip;q=0", "br"} {
			res, b := get("/assets/"+name, accept, "")
			assert.Empty(t, res.Header.Get("Content-Encoding"), "%s with Accept-Encoding %q", name, accept)
			assert.Equal(t, plain, b)
			assert.Equal(t, assets[name].etag, res.Header.Get("ETag"))
		}
	}
}

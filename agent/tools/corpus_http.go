package tools

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"
)

// Handler serves the corpus pages: GET /kb/ (the index) and GET /kb/{slug} (one document as HTML,
// its <title> the document title). Mount it at "/kb/" on the gateway's mux.
func (c *Corpus) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /kb", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/kb/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /kb/{$}", c.serveIndex)
	mux.HandleFunc("GET /kb/{slug}", c.serveDoc)
	mux.HandleFunc("/kb/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		c.notFound(w)
	})
	return mux
}

func setPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// Documents are sanitised already; the policy is a second fence (no scripts at all).
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' https: data:; base-uri 'none'; form-action 'none'")
}

type indexEntry struct {
	Title, Href, Summary string
}

func (c *Corpus) serveIndex(w http.ResponseWriter, r *http.Request) {
	entries := make([]indexEntry, 0, len(c.docs))
	for _, d := range c.sortedDocs() {
		sum, cut := truncateRunes(strings.Join(strings.Fields(d.Text), " "), 120)
		if cut {
			sum += "…"
		}
		entries = append(entries, indexEntry{Title: d.Title, Href: url.PathEscape(d.Slug), Summary: sum})
	}
	setPageHeaders(w)
	if err := pageTemplate.ExecuteTemplate(w, "index", map[string]any{"Title": "知识库", "Entries": entries}); err != nil {
		// Headers are gone already; the client sees a short page.
		return
	}
}

func (c *Corpus) serveDoc(w http.ResponseWriter, r *http.Request) {
	d, ok := c.bySlug[r.PathValue("slug")]
	if !ok {
		c.notFound(w)
		return
	}
	setPageHeaders(w)
	_ = pageTemplate.ExecuteTemplate(w, "doc", map[string]any{
		"Title": d.Title, "ShowTitle": d.showTitle, "Body": d.body, "IndexURL": "./", "URL": d.URL,
	})
}

func (c *Corpus) notFound(w http.ResponseWriter) {
	setPageHeaders(w)
	w.WriteHeader(http.StatusNotFound)
	_ = pageTemplate.ExecuteTemplate(w, "notfound", map[string]any{"Title": "未找到文档", "IndexURL": "/kb/"})
}

var pageTemplate = template.Must(template.New("kb").Parse(`
{{define "head"}}<!doctype html>
<html lang="zh-CN"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font:16px/1.7 -apple-system,"PingFang SC","Microsoft YaHei",sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#1f2328;background:#fff}
a{color:#0969da}h1{font-size:1.6rem;line-height:1.3}table{border-collapse:collapse;margin:1rem 0}
th,td{border:1px solid #d0d7de;padding:.35rem .6rem;text-align:left}code{background:#f6f8fa;padding:.1rem .3rem;border-radius:4px}
nav{font-size:.9rem;margin-bottom:1rem}li p{margin:.2rem 0}.summary{color:#59636e;font-size:.9rem}
@media (prefers-color-scheme:dark){body{background:#0d1117;color:#e6edf3}a{color:#4493f8}th,td{border-color:#3d444d}code{background:#161b22}.summary{color:#9198a1}}
</style></head><body>{{end}}
{{define "index"}}{{template "head" .}}
<h1>知识库</h1>
<ul>{{range .Entries}}<li><p><a href="{{.Href}}">{{.Title}}</a></p><p class="summary">{{.Summary}}</p></li>{{end}}</ul>
</body></html>{{end}}
{{define "doc"}}{{template "head" .}}
<nav><a href="{{.IndexURL}}">← 知识库</a></nav>
<article>{{if .ShowTitle}}<h1>{{.Title}}</h1>{{end}}
{{.Body}}
</article>
</body></html>{{end}}
{{define "notfound"}}{{template "head" .}}
<h1>未找到文档</h1><p>知识库中没有这个文档。<a href="{{.IndexURL}}">返回知识库目录</a></p>
</body></html>{{end}}
`))

package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	readability "codeberg.org/readeck/go-readability/v2"
	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Fetch defaults.
const (
	DefaultFetchTimeout = 15 * time.Second
	DefaultMaxBytes     = 2 << 20
	DefaultMaxRedirects = 5
	DefaultMaxChars     = 16000
	DefaultUserAgent    = "citegate/1.0 (+open_web_page)"
)

// FetchOptions configures a Fetcher. Zero values mean the defaults.
type FetchOptions struct {
	Timeout      time.Duration // whole fetch, redirects and body included; default 15s
	MaxBytes     int64         // body bytes read; default 2 MiB; a longer body is cut and reported as truncated
	MaxRedirects int           // default 5; a negative value forbids redirects
	MaxChars     int           // runes of extracted text; default 16000
	Allow        []string      // CIDRs, IPs or host names reachable despite the private-address guard
	UserAgent    string
	Logger       *slog.Logger // fetch failures and contained panics; nil discards them
}

// Page is a fetched page as open_web_page reports it. URL is the URL asked for (redirects are
// followed but do not change it, so a page keeps the registry number of the search result it came
// from); ContentLength is the length in runes of the whole extracted text, Content at most
// MaxChars runes of it; Truncated says that text was cut (by MaxChars or MaxBytes).
type Page struct {
	URL, Title, Content string
	ContentLength       int
	Truncated           bool
}

// Fetcher opens web pages for open_web_page and for the gateway's preview recheck. Connections to
// private, loopback and similar addresses are refused at dial time unless Allow lists them; URLs
// of the local corpus are answered in-process. It is safe for concurrent use.
type Fetcher struct {
	opt    FetchOptions
	corpus *Corpus
	client *http.Client
}

// Fetch errors callers may test for with errors.Is.
var (
	ErrUnsupportedURL         = errors.New("unsupported URL")
	ErrUnsupportedContentType = errors.New("unsupported content type")
	ErrTooManyRedirects       = errors.New("too many redirects")
	ErrNotFound               = errors.New("page not found")
)

// NewFetcher builds a Fetcher. corpus may be nil. A malformed Allow entry is an error.
func NewFetcher(opt FetchOptions, corpus *Corpus) (*Fetcher, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultFetchTimeout
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.MaxRedirects == 0 {
		opt.MaxRedirects = DefaultMaxRedirects
	}
	if opt.MaxChars <= 0 {
		opt.MaxChars = DefaultMaxChars
	}
	if strings.TrimSpace(opt.UserAgent) == "" {
		opt.UserAgent = DefaultUserAgent
	}
	g, err := newGuard(opt.Allow)
	if err != nil {
		return nil, fmt.Errorf("fetcher: %w", err)
	}
	tr := &http.Transport{
		// No proxy: the guard must see the address really dialled.
		Proxy:                 nil,
		DialContext:           g.dialContext(opt.Timeout),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		IdleConnTimeout:       60 * time.Second,
		TLSHandshakeTimeout:   opt.Timeout,
		ResponseHeaderTimeout: opt.Timeout,
	}
	maxRedirects := opt.MaxRedirects
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Fetcher{opt: opt, corpus: corpus}
	f.client = &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return fmt.Errorf("%w (more than %d)", ErrTooManyRedirects, max(maxRedirects, 0))
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("%w: redirect to a %s: URL", ErrUnsupportedURL, req.URL.Scheme)
			}
			return nil
		},
	}
	return f, nil
}

// Live is a page's current text in each form a tool extracts from a page at retrieval time, so
// that a later check can compare an excerpt with the live page like with like.
type Live struct {
	// Page is what open_web_page returns for the URL now: the same extraction (readability, the
	// corpus text, or plain text) cut to the same MaxChars.
	Page
	// Passages is the page's text as the local search renders its passages: one structural line
	// per heading ("## …"), list item ("- …", "1. …"), table row ("| … |") or paragraph.
	Passages string
	// Full is the visible text of the whole page, title included: what a search engine's snippet
	// is taken from.
	Full string
}

// Fetch opens rawURL and returns its readable text.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string) (Page, error) {
	l, err := f.fetch(ctx, rawURL, false)
	return l.Page, err
}

// FetchLive opens rawURL like Fetch and also returns the page's text in the forms web_search
// excerpts are taken from (see Live). The gateway's "compare with the live page" uses it.
func (f *Fetcher) FetchLive(ctx context.Context, rawURL string) (Live, error) {
	return f.fetch(ctx, rawURL, true)
}

// fetch opens rawURL; live asks for Live's extra forms as well.
func (f *Fetcher) fetch(ctx context.Context, rawURL string, live bool) (Live, error) {
	raw := strings.TrimSpace(rawURL)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return Live{}, fmt.Errorf("fetch: %w: %q is not an absolute URL", ErrUnsupportedURL, raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return Live{}, fmt.Errorf("fetch: %w: only http and https URLs can be opened", ErrUnsupportedURL)
	}
	u.Fragment = ""
	if f.corpus != nil {
		if slug, ok := f.corpus.slugOf(raw); ok {
			return f.corpusPage(raw, slug)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, f.opt.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Live{}, fmt.Errorf("fetch: %w: %v", ErrUnsupportedURL, err)
	}
	req.Header.Set("User-Agent", f.opt.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,text/markdown;q=0.9,*/*;q=0.1")
	req.Header.Set("Accept-Language", "zh-CN,zh;q=0.9,en;q=0.8")
	resp, err := f.client.Do(req)
	if err != nil {
		return Live{}, f.describe(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone {
			return Live{}, fmt.Errorf("fetch: %w: HTTP %d %s", ErrNotFound, resp.StatusCode, http.StatusText(resp.StatusCode))
		}
		return Live{}, fmt.Errorf("fetch: the server answered HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.opt.MaxBytes+1))
	if err != nil {
		return Live{}, f.describe(ctx, err)
	}
	cut := int64(len(body)) > f.opt.MaxBytes
	if cut {
		body = trimPartialRune(body[:f.opt.MaxBytes])
		f.opt.Logger.Info("open_web_page: body cut at the size limit", "host", u.Host, "limit", f.opt.MaxBytes)
	}
	ctype := resp.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil || mt == "" || mt == "application/octet-stream" {
		ctype = http.DetectContentType(body)
		mt, _, _ = mime.ParseMediaType(ctype)
	}
	var x extraction
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		x = extractHTML(toUTF8(body, ctype, true), resp.Request.URL, live)
		if x.readabilityPanic != nil {
			f.opt.Logger.Warn("open_web_page: readability panicked", "url", rawURL, "panic", x.readabilityPanic)
		}
	case mt == "text/plain" || mt == "text/markdown" || mt == "text/x-markdown":
		x.text = plainText(toUTF8(body, ctype, false))
		x.title = markdownTitle(x.text)
		x.passages, x.full = x.text, x.text
	default:
		return Live{}, fmt.Errorf("fetch: %w %s: only HTML, plain text and Markdown pages can be opened", ErrUnsupportedContentType, mt)
	}
	return Live{Page: f.page(raw, x.title, x.text, cut), Passages: x.passages, Full: x.full}, nil
}

// page assembles a Page, cutting text to MaxChars.
func (f *Fetcher) page(u, title, text string, cut bool) Page {
	n := utf8.RuneCountInString(text)
	content, cutChars := truncateRunes(text, f.opt.MaxChars)
	return Page{URL: u, Title: title, Content: content, ContentLength: n, Truncated: cut || cutChars}
}

// corpusPage answers a URL of the local corpus without touching the network. Its passages are
// the document's own blocks, the very lines the local search builds its excerpts from.
func (f *Fetcher) corpusPage(u, slug string) (Live, error) {
	if slug == "" {
		var b strings.Builder
		for _, d := range f.corpus.sortedDocs() {
			fmt.Fprintf(&b, "%s\n%s\n\n", d.Title, d.URL)
		}
		text := strings.TrimSpace(b.String())
		return Live{Page: f.page(u, "知识库目录", text, false), Passages: text, Full: text}, nil
	}
	d, ok := f.corpus.bySlug[slug]
	if !ok {
		return Live{}, fmt.Errorf("fetch: %w: no knowledge-base document %q", ErrNotFound, slug)
	}
	return Live{Page: f.page(u, d.Title, d.Text, false), Passages: blocksText(d.blocks), Full: d.Title + "\n" + d.Text}, nil
}

// blocksText joins blocks one per line, as passages join them.
func blocksText(bs []block) string {
	var b strings.Builder
	for _, x := range bs {
		b.WriteString(x.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// describe turns a transport error into a readable one, keeping the cause for errors.Is.
func (f *Fetcher) describe(ctx context.Context, err error) error {
	var ne net.Error
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, ErrForbiddenAddress):
		return fmt.Errorf("fetch: refusing to connect: %w", unwrapTo(err, ErrForbiddenAddress))
	case errors.Is(err, ErrTooManyRedirects), errors.Is(err, ErrUnsupportedURL):
		return fmt.Errorf("fetch: %w", innermost(err))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return fmt.Errorf("fetch: timed out after %s: %w", f.opt.Timeout, context.DeadlineExceeded)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("fetch: cancelled: %w", context.Canceled)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("fetch: cannot resolve host %s: %w", dnsErr.Name, err)
	}
	return fmt.Errorf("fetch: %w", err)
}

// unwrapTo returns the error in err's chain that wraps target most closely (its message is the
// most specific one), or target itself.
func unwrapTo(err, target error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if u := errors.Unwrap(e); u == target {
			return e
		}
	}
	return target
}

// innermost strips url.Error and similar wrappers whose messages repeat the URL.
func innermost(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// extractHTML returns the title and readable text of an HTML page: readability's article text,
// or — when readability finds no article or only a sliver of the page — the visible text of the
// whole body. A page the tree builder refuses (nested deeper than its 512-element limit) is read
// with the tokenizer instead, so the model still gets its text and never its markup.
//
// With live set it also renders the page's passages and full text (see Live).
func extractHTML(src string, pageURL *url.URL, live bool) extraction {
	doc, err := html.Parse(strings.NewReader(src))
	if err != nil {
		title, text := tokenText(src)
		x := extraction{title: title, text: text}
		if live {
			x.passages, x.full = text, title+"\n"+text
		}
		return x
	}
	pageTitle := strings.TrimSpace(nodeText(findElement(doc, atom.Title)))
	body := findElement(doc, atom.Body)
	if body == nil {
		body = doc
	}
	full := htmlText(body)
	var passages string
	if live {
		// Before readability, which rearranges the tree it is given.
		w := &blockWriter{}
		w.walk(body)
		w.flush()
		passages = blocksText(w.out)
	}
	title, text, perr := readable(doc, pageURL)
	if title == "" {
		title = pageTitle
	}
	if n := utf8.RuneCountInString(text); n == 0 || (n < 200 && utf8.RuneCountInString(full) > 3*n) {
		text = full
	}
	x := extraction{title: cleanText(title), text: text, readabilityPanic: perr}
	if live {
		x.passages, x.full = passages, pageTitle+"\n"+full
	}
	return x
}

// extraction is what extractHTML finds in a page.
type extraction struct {
	title, text    string
	passages, full string // only for live checks
	// readabilityPanic is what a panic inside readability carried; the caller logs it.
	readabilityPanic any
}

// readable runs readability on doc. A panic inside the parser (it walks arbitrary markup) is
// treated as "no article found", so the caller falls back to the page's plain text.
func readable(doc *html.Node, pageURL *url.URL) (title, text string, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			title, text, panicked = "", "", p
		}
	}()
	article, err := readability.FromDocument(doc, pageURL)
	if err != nil || article.Node == nil {
		return "", "", nil
	}
	var b bytes.Buffer
	if article.RenderText(&b) == nil {
		text = cleanText(b.String())
	}
	return strings.TrimSpace(article.Title()), text, nil
}

// plainText normalises a text or Markdown body without touching its inner layout.
func plainText(s string) string {
	s = strings.TrimPrefix(s, "\uFEFF")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
}

// markdownTitle is the text of a leading "# " heading, if any.
func markdownTitle(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	if t, ok := strings.CutPrefix(strings.TrimSpace(first), "# "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of a body cut at a byte limit.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// NewOpenWebPage returns the open_web_page tool over f.
func NewOpenWebPage(f *Fetcher) agent.Tool { return &openWebPage{f: f} }

type openWebPage struct{ f *Fetcher }

var openWebPageParams = json.RawMessage(`{
  "type": "object",
  "properties": {
    "url": {"type": "string", "description": "要打开的网页地址（http 或 https）/ the http(s) URL to open"}
  },
  "required": ["url"],
  "additionalProperties": false
}`)

// Spec describes open_web_page to the model.
func (o *openWebPage) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: citations.ToolOpenWebPage,
		Description: "打开一个网页（通常是 web_search 结果中的链接），返回页面标题和正文文本；正文过长时会被截断。" +
			"Open a web page (usually a web_search result) and return its title and readable text. " +
			"引用本工具结果时，在句末使用 [^n^] 标记，n 为结果中的 ref 编号。",
		Parameters: openWebPageParams,
	}
}

type openWebPageOutput struct {
	URL           string `json:"url"`
	Title         string `json:"title"`
	Content       string `json:"content"`
	ContentLength int    `json:"content_length"`
	Truncated     bool   `json:"truncated"`
}

// Call opens the page. Bad arguments and fetch failures come back as {"error": "…", "url": "…"};
// the Go error is always nil.
func (o *openWebPage) Call(ctx context.Context, arguments string) (out string, _ error) {
	var args struct {
		URL *string `json:"url"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(arguments)), &args); err != nil {
		return pageFailure(`invalid arguments: expected a JSON object like {"url": "https://…"}`, ""), nil
	}
	if args.URL == nil || strings.TrimSpace(*args.URL) == "" {
		return pageFailure(`invalid arguments: "url" is required and must be a non-empty string`, ""), nil
	}
	u := strings.TrimSpace(*args.URL)
	defer func() {
		if p := recover(); p != nil {
			o.f.opt.Logger.Error("open_web_page panicked", "panic", p)
			out = pageFailure("cannot open the page: internal error", u)
		}
	}()
	p, err := o.f.Fetch(ctx, u)
	if err != nil {
		o.f.opt.Logger.Info("open_web_page failed", "err", err)
		return pageFailure("cannot open the page: "+strings.TrimPrefix(err.Error(), "fetch: "), u), nil
	}
	return marshal(openWebPageOutput{URL: p.URL, Title: p.Title, Content: p.Content, ContentLength: p.ContentLength, Truncated: p.Truncated}), nil
}

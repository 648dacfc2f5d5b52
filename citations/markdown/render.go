// Package markdown renders stored answers to HTML on the server: goldmark with an extension that
// turns [^n^] markers into superscripts numbered by display number (citations.DisplayNumbers), and
// the "来源"/"Sources" section listing the verified citations. Code spans and code blocks are never
// parsed for markers, so markers there stay literal. Output is sanitised twice: goldmark never
// passes raw HTML through (no WithUnsafe), and a bluemonday policy filters the result.
package markdown

import (
	"bytes"
	"html"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/citegate/citegate/citations"
	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/util"
)

// Options tune one rendering.
type Options struct {
	// Lang selects the labels: "en…" gives "Sources N"/"Excerpt", anything else "来源 N"/"摘录".
	Lang string
	// Anchor is unique per message on a page (e.g. "m42"); ids are "{Anchor}-src-{k}" for source
	// entries and "{Anchor}-ref-{k}-{i}" for superscripts. Empty or unsafe values become "cite".
	Anchor string
	// MessageID is put on the excerpt buttons (data-message); 0 omits the buttons, e.g. on share
	// pages, where the preview API is not available.
	MessageID uint64
	// AllowLink decides which URLs the answer may show (DESIGN §4, link rule), e.g.
	// citations.AllowList(metadata.links.allowed ∪ citation URLs). The citations' own URLs are always
	// allowed; nil allows nothing else. A link whose URL is not allowed shows its text without the
	// link, an image its alt text, an autolink or bare URL citations.HiddenLinkNotice.
	AllowLink func(string) bool
	// SiteName names the site of a citation's URL for the sources list and the source card; ""
	// (or a nil func) means the URL's domain. The gateway names its own knowledge corpus pages
	// (/kb/…) by their document's title, where the domain would only say "127.0.0.1".
	SiteName func(url string) string
	// PlainCode renders fenced code without syntax highlighting (escaped text in <pre><code>, the
	// language class kept). Highlighting needs HighlightCSS on the page.
	PlainCode bool
	// Now is the clock the highlighting deadline is measured with; nil means time.Now.
	Now func() time.Time
}

// Rendered is the outcome of RenderAnswer.
type Rendered struct {
	HTML string
	// Hidden counts the links the link rule hid.
	Hidden int
	// Cited are the citations the sources section lists: those a superscript points to.
	Cited []citations.Citation
	// Degraded reports that the answer exceeded a render bound: too many emphasis delimiters
	// (rendered without emphasis parsing, see emphasisBudget) or too many brackets or nesting
	// levels (rendered as text with superscripts, see maxBrackets and maxNesting).
	Degraded bool
	// Panic, when not nil, is what goldmark panicked with; the answer was then shown as escaped
	// text. The caller logs it (this package has no logger of its own).
	Panic any
}

// MaxTitleRunes bounds a source title as displayed, "…" included.
const MaxTitleRunes = 60

// collapseAt is the number of sources from which the section starts collapsed.
const collapseAt = 4

// linkifyURL and linkifyWWW are goldmark's linkify patterns with the URL characters the citations
// scanner uses (no quotes, brackets, braces, '^', '>' or backtick), so a bare URL is one URL to
// both: "https://a.example/x[^1^]" links https://a.example/x and keeps its superscript.
var (
	linkifyURL = regexp.MustCompile(`^(?:http|https)://[-a-zA-Z0-9@:%._\+~#=]{1,256}\.[a-z]+(?::\d+)?(?:[/#?][-a-zA-Z0-9@:%_+.~#$!?&/=\(\);,]*)?`)
	linkifyWWW = regexp.MustCompile(`^www\.[-a-zA-Z0-9@:%._\+~#=]{1,256}\.[a-z]+(?:[/#?][-a-zA-Z0-9@:%_+.~#$!?&/=\(\);,]*)?`)
)

// gfm is extension.GFM with the linkify patterns above.
func gfm() []goldmark.Extender {
	return []goldmark.Extender{
		extension.NewLinkify(
			extension.WithLinkifyAllowedProtocols([]string{"http:", "https:"}),
			extension.WithLinkifyURLRegexp(linkifyURL),
			extension.WithLinkifyWWWRegexp(linkifyWWW),
		),
		extension.Table, extension.Strikethrough, extension.TaskList,
	}
}

var md = goldmark.New(
	goldmark.WithExtensions(append(gfm(), extension.CJK, citationExtension{}, linkExtension{})...),
)

// mdNoEmphasis renders answers over the emphasis budget: goldmark's delimiter processing compares
// every closing '*'/'_'/'~' run with every earlier opener of its paragraph, so 64 KiB of "_a**"
// costs seconds. Without the emphasis and strikethrough parsers the delimiters stay text; links,
// code, lists, tables and citations work as usual.
var mdNoEmphasis = goldmark.New(
	goldmark.WithParser(parser.NewParser(
		parser.WithBlockParsers(parser.DefaultBlockParsers()...),
		// parser.DefaultInlineParsers without NewEmphasisParser.
		parser.WithInlineParsers(
			util.Prioritized(parser.NewCodeSpanParser(), 100),
			util.Prioritized(parser.NewLinkParser(), 200),
			util.Prioritized(parser.NewAutoLinkParser(), 300),
			util.Prioritized(parser.NewRawHTMLParser(), 400),
		),
		parser.WithParagraphTransformers(parser.DefaultParagraphTransformers()...),
	)),
	goldmark.WithExtensions(
		extension.NewLinkify(
			extension.WithLinkifyAllowedProtocols([]string{"http:", "https:"}),
			extension.WithLinkifyURLRegexp(linkifyURL),
			extension.WithLinkifyWWWRegexp(linkifyWWW),
		),
		extension.Table, extension.TaskList, extension.CJK, citationExtension{}, linkExtension{}),
)

// emphasisBudget bounds the delimiter comparisons one render may cost: the sum over paragraphs of
// (delimiter runs)²/2. 200 000 comparisons take about a millisecond; an ordinary long answer (a few
// dozen bold phrases per paragraph) stays far below it.
const emphasisBudget = 200_000

// overEmphasisBudget estimates goldmark's delimiter work for content: runs of '*', '_' or '~' per
// block of lines between blank lines (an over-estimate: code and list items are counted as one
// paragraph), squared.
func overEmphasisBudget(content string) bool {
	cost, runs := 0, 0
	var prev byte
	lineBlank := true
	for i := 0; i < len(content); i++ {
		c := content[i]
		switch c {
		case '*', '_', '~':
			if prev != c {
				runs++
			}
			lineBlank = false
		case '\n':
			if lineBlank {
				cost += runs * runs / 2
				runs = 0
				if cost > emphasisBudget {
					return true
				}
			}
			lineBlank = true
		case ' ', '\t', '\r':
		default:
			lineBlank = false
		}
		prev = c
	}
	cost += runs * runs / 2
	return cost > emphasisBudget
}

var anchorRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

func (o Options) anchor() string {
	if anchorRE.MatchString(o.Anchor) {
		return o.Anchor
	}
	return "cite"
}

func (o Options) english() bool { return strings.HasPrefix(strings.ToLower(o.Lang), "en") }

// Render returns the answer body as HTML followed by the sources section (none when no citation
// is pointed at). Markers whose number is not among cits vanish; a citation no superscript points
// to (its markers were all inside code, say) is not listed.
func Render(content string, cits []citations.Citation, opt Options) string {
	return RenderAnswer(content, cits, opt).HTML
}

// RenderAnswer is Render with what the link rule hid and which citations are listed.
func RenderAnswer(content string, cits []citations.Citation, opt Options) Rendered {
	r := renderBody(content, cits, opt)
	r.HTML += RenderSources(r.Cited, opt)
	return r
}

// RenderBody renders content as markdown with superscripts for the markers that point at cits.
func RenderBody(content string, cits []citations.Citation, opt Options) string {
	return renderBody(content, cits, opt).HTML
}

func renderBody(content string, cits []citations.Citation, opt Options) Rendered {
	r, _ := renderBodyState(content, cits, opt, true)
	return r
}

// renderBodyState is renderBody, with the superscripts spliced in after sanitising (splice, see
// supPlaceholder) or sanitised with the rest; it returns the final render state too (tests).
func renderBodyState(content string, cits []citations.Citation, opt Options, splice bool) (out Rendered, st *renderState) {
	// goldmark's CJK line-break handling indexes runes and panics on invalid UTF-8 (found by
	// FuzzRender); models and stores can hand us such bytes, so repair them first.
	content = strings.ToValidUTF8(content, "\uFFFD")
	allow := allowFunc(cits, opt.AllowLink)
	defer func() {
		// goldmark is foreign code: should another input make it panic, the answer is still shown,
		// as escaped text without markers, rather than taking the request down.
		if r := recover(); r != nil {
			text, hidden := citations.SafeText(content, allow)
			out = Rendered{HTML: RenderPlain(text), Hidden: hidden, Panic: r}
		}
	}()
	valid := usable(cits)
	newState := func(placeholders bool) *renderState {
		return &renderState{valid: valid, anchor: opt.anchor(), allow: allow, plainCode: opt.PlainCode, clock: opt.Now, placeholders: placeholders}
	}
	if needsPlain(content) {
		st = newState(false)
		html, hidden := hideTextURLs(policy.Sanitize(renderPlain(content, st)), allow)
		return Rendered{HTML: html, Hidden: st.hidden + hidden, Cited: st.cited, Degraded: true}, st
	}
	conv := md
	if overEmphasisBudget(content) {
		conv, out.Degraded = mdNoEmphasis, true
	}
	convert := func(st *renderState) (string, error) {
		pc := parser.NewContext()
		pc.Set(stateKey, st)
		var buf bytes.Buffer
		err := conv.Convert([]byte(content), &buf, parser.WithContext(pc))
		return buf.String(), err
	}
	st = newState(splice)
	body, err := convert(st)
	if err != nil {
		// goldmark's HTML renderer only fails when its writer fails; a bytes.Buffer does not. Should
		// it ever happen, showing the text escaped loses nothing.
		text, hidden := citations.SafeText(content, allow)
		return Rendered{HTML: RenderPlain(text), Hidden: hidden}, st
	}
	sanitized := policy.Sanitize(body)
	if st.placeholders {
		var ok bool
		if sanitized, ok = spliceSups(sanitized, st.sups); !ok {
			// Not expected (the sanitiser keeps every <sup> it is given): render the way without
			// placeholders, where the sanitiser sees the superscripts themselves.
			st = newState(false)
			if body, err = convert(st); err != nil {
				text, hidden := citations.SafeText(content, allow)
				return Rendered{HTML: RenderPlain(text), Hidden: hidden}, st
			}
			sanitized = policy.Sanitize(body)
		}
	}
	html, hidden := hideTextURLs(sanitized, allow)
	out.HTML, out.Hidden, out.Cited = html, st.hidden+hidden, st.cited
	return out, st
}

// Superscripts skip the sanitiser. The policy passes a superscript unchanged, byte for byte: its
// anchor matches anchorRE (letters, digits, '-', '_': a valid id and URL fragment), its numbers are
// at most citations.MaxDigits digits (data-n, data-k allow 10), its class and relative href are
// allowed, and it is never inside a link (citationTransformer moves markers out of links, so no
// skipped <a> of the sanitiser can take its </a>). Checking that for every superscript of every
// answer was a third or more of the sanitiser's work on a cited answer, so goldmark writes
// supPlaceholder in their place (an allowed element, kept as it is; goldmark escapes every '<' of
// the answer's text and writes raw HTML as text, so nothing else in its output is a <sup>), the
// sanitiser runs over the rest, and spliceSups puts the superscripts in. TestSpliceMatchesSanitiser
// and FuzzSpliceMatchesSanitiser compare the result with sanitising the superscripts.
const supPlaceholder = "<sup></sup>"

// spliceSups replaces the placeholders in html, in order, with sups; ok is false when their number
// does not match.
func spliceSups(html string, sups []string) (_ string, ok bool) {
	if strings.Count(html, supPlaceholder) != len(sups) {
		return html, false
	}
	if len(sups) == 0 {
		return html, true
	}
	n := len(html)
	for _, s := range sups {
		n += len(s) - len(supPlaceholder)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range sups {
		i := strings.Index(html, supPlaceholder)
		b.WriteString(html[:i])
		b.WriteString(s)
		html = html[i+len(supPlaceholder):]
	}
	b.WriteString(html)
	return b.String(), true
}

// allowFunc is the link rule's allow-func for one answer: the caller's plus the citations' URLs.
func allowFunc(cits []citations.Citation, extra func(string) bool) func(string) bool {
	urls := make([]string, 0, len(cits))
	for _, c := range cits {
		urls = append(urls, c.URL)
	}
	own := citations.AllowList(urls)
	if extra == nil {
		return own
	}
	return func(u string) bool { return own(u) || extra(u) }
}

// RenderSources renders the "来源 N" section; "" when no citation is usable.
func RenderSources(cits []citations.Citation, opt Options) string {
	html, unchanged := sourcesHTML(usable(cits), opt)
	if unchanged {
		return html
	}
	return policy.Sanitize(html)
}

// sourcesHTML is the sources section of valid before sanitising, and whether the sanitiser would
// return it unchanged (see textPassesUnchanged).
func sourcesHTML(valid []citations.Citation, opt Options) (_ string, unchanged bool) {
	if len(valid) == 0 {
		return "", true
	}
	display := citations.DisplayNumbers(valid)
	anchor := opt.anchor()
	label, excerpt, kb := "来源", "摘录", "知识库"
	if opt.english() {
		label, excerpt, kb = "Sources", "Excerpt", "Knowledge base"
	}
	var b strings.Builder
	b.WriteString(`<details class="sources"`)
	if len(valid) < collapseAt {
		b.WriteString(` open=""`)
	}
	b.WriteString(`><summary>` + label + ` ` + strconv.Itoa(len(valid)) + `</summary><ol>`)
	unchanged = true
	for _, c := range valid {
		k := strconv.Itoa(display[c.N])
		n := strconv.Itoa(c.N)
		domain, fallback := describeURL(c.URL)
		title := displayTitle(c.Title, fallback)
		site := domain
		if opt.SiteName != nil {
			if name := displayTitle(opt.SiteName(c.URL), ""); name != "" {
				// A corpus page's title usually is its document's title; saying it twice tells
				// less than saying where it comes from.
				site = name
				if name == title {
					site = kb
				}
			}
		}
		unchanged = unchanged && len(n) <= 10 && urlPassesUnchanged(c.URL) && textPassesUnchanged(title) && textPassesUnchanged(site)
		b.WriteString(`<li id="` + anchor + `-src-` + k + `" class="source" data-n="` + n + `">`)
		b.WriteString(`<span class="src-num">` + k + `</span> `)
		b.WriteString(`<a href="` + html.EscapeString(c.URL) + `" target="_blank" rel="noopener noreferrer">`)
		b.WriteString(html.EscapeString(title) + `</a>`)
		if site != "" {
			b.WriteString(` <span class="src-domain">` + html.EscapeString(site) + `</span>`)
		}
		if opt.MessageID != 0 {
			// What the source card shows besides title and site (the desktop builds it from
			// these, without a request): when the source was retrieved and the first lines of
			// the excerpt. Share pages leave them out; the card is the desktop's.
			if c.RetrievedAt != nil && !c.RetrievedAt.IsZero() {
				at := c.RetrievedAt.UTC()
				unchanged = unchanged && at.Year() >= 0 && at.Year() <= 9999
				b.WriteString(` <time class="src-time" datetime="` + at.Format(time.RFC3339) + `">` + at.Format("2006-01-02 15:04 UTC") + `</time>`)
			}
			if lead := citations.Lead(c.Lead); lead != "" {
				unchanged = unchanged && textPassesUnchanged(lead)
				b.WriteString(` <span class="src-lead">` + html.EscapeString(lead) + `</span>`)
			}
			b.WriteString(` <button type="button" class="src-preview" data-message="` +
				strconv.FormatUint(opt.MessageID, 10) + `" data-n="` + n + `">` + excerpt + `</button>`)
		}
		b.WriteString(`</li>`)
	}
	b.WriteString(`</ol></details>`)
	return b.String(), unchanged
}

// The sources list skips the sanitiser when it would return the list byte for byte. The markup is
// this package's own: every element, class and attribute in it is one the policy allows as
// written (ids from anchorRE, numbers within the patterns' digits), and what varies with the
// citations is escaped text, the URL and numbers. The sanitiser rewrites only these inputs, which
// take it as before:
//   - a URL that does not read back the same from net/url (the sanitiser writes url.Parse's
//     String) or holds white space (it drops such an href);
//   - text with a carriage return (its tokenizer turns one into a line feed), a NUL byte or
//     invalid UTF-8 (left to the sanitiser rather than reasoned about);
//   - a registry number of more than 10 digits (data-n allows 10), a retrieval time whose year
//     is not written with 4 digits (the datetime pattern).
//
// TestSourcesMatchSanitiser and FuzzSourcesMatchSanitiser compare the two.

// textPassesUnchanged reports whether escaped text s passes the sanitiser unchanged.
func textPassesUnchanged(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsAny(s, "\r\x00")
}

// urlPassesUnchanged reports whether an http(s) URL (usable's) passes the sanitiser's href check
// unchanged.
func urlPassesUnchanged(u string) bool {
	if !textPassesUnchanged(u) || strings.ContainsFunc(u, unicode.IsSpace) {
		return false
	}
	p, err := url.Parse(u)
	return err == nil && p.String() == u
}

// RenderExcerpt renders a source's excerpt (the text a tool gave the model) as sanitised HTML for
// the excerpt panel: markdown with its headings, lists and tables, code highlighted, markers
// removed (an excerpt has no citations of its own), and links only to URLs the excerpt itself
// holds (they were seen by the run; DESIGN §4). The render budgets of answers apply.
func RenderExcerpt(text string) string {
	links := citations.NewLinkSet()
	links.AddText(text)
	return renderBody(text, nil, Options{Anchor: "excerpt", AllowLink: links.Allows}).HTML
}

// Domain is the domain a sources list shows for an http(s) URL ("example.com", without "www.").
func Domain(u string) string {
	d, _ := describeURL(u)
	return d
}

// RenderPlain renders a user message: escaped text in one paragraph, line breaks kept.
func RenderPlain(text string) string {
	text = strings.TrimRight(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	if strings.TrimSpace(text) == "" {
		return ""
	}
	return `<p class="plain">` + strings.ReplaceAll(html.EscapeString(text), "\n", "<br>\n") + `</p>`
}

// usable keeps the citations a page may show: positive numbers, http(s) URLs, each number once,
// ordered by number. citations.FromMetadata already guarantees this for stored records; Render
// enforces it again because it cannot know where its input came from.
func usable(cits []citations.Citation) []citations.Citation {
	out := make([]citations.Citation, 0, len(cits))
	seen := map[int]bool{}
	for _, c := range cits {
		u, ok := citations.NormalizeURL(c.URL)
		if !ok || c.N < 1 || seen[c.N] {
			continue
		}
		seen[c.N] = true
		c.URL = u
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b citations.Citation) int { return a.N - b.N })
	return out
}

// describeURL returns the domain badge ("example.com", without "www.") and the fallback title
// (domain + path) of an http(s) URL.
func describeURL(raw string) (domain, fallback string) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", raw
	}
	domain = strings.TrimPrefix(strings.ToLower(u.Hostname()), "www.")
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	if p, err := url.PathUnescape(path); err == nil && utf8.ValidString(p) {
		path = p
	}
	return domain, domain + path
}

// displayTitle trims a title to MaxTitleRunes runes ("…" included), falling back when it is blank.
func displayTitle(title, fallback string) string {
	t := strings.Join(strings.Fields(title), " ")
	if t == "" {
		t = fallback
	}
	if utf8.RuneCountInString(t) <= MaxTitleRunes {
		return t
	}
	r := []rune(t)
	return strings.TrimRight(string(r[:MaxTitleRunes-1]), " ") + "…"
}

// policy is the second line of defence: UGC rules plus exactly the classes, ids and data
// attributes this package emits; only http, https, mailto and relative URLs; external links get
// target="_blank" and rel="noopener noreferrer".
var policy = newPolicy()

func newPolicy() *bluemonday.Policy {
	p := bluemonday.UGCPolicy()
	p.RequireNoFollowOnLinks(false)
	p.RequireNoReferrerOnFullyQualifiedLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	p.AllowURLSchemes("http", "https", "mailto")
	p.AllowElements("details", "summary", "sup")
	p.AllowAttrs("open").Matching(regexp.MustCompile(`^(|open)$`)).OnElements("details")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^sources$`)).OnElements("details")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^cite-ref$`)).OnElements("sup")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^source$`)).OnElements("li")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^(src-num|src-domain|src-lead)$`)).OnElements("span")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^src-time$`)).OnElements("time")
	p.AllowAttrs("datetime").Matching(regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$`)).OnElements("time")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^src-preview$`)).OnElements("button")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^plain$`)).OnElements("p")
	// An ordered list keeps its first number ("3. …" renders from 3); goldmark writes start only
	// when it is not 1, and CommonMark allows at most 9 digits.
	p.AllowAttrs("start").Matching(regexp.MustCompile(`^[0-9]{1,9}$`)).OnElements("ol")
	// Fenced code keeps its language class, highlighted code its chroma wrapper and token classes
	// (chroma writes one class per span; see highlight.go).
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^language-[\w+-]{1,32}$`)).OnElements("code")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^chroma$`)).OnElements("pre")
	p.AllowAttrs("class").Matching(chromaClassRE).OnElements("span")
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^button$`)).OnElements("button")
	p.AllowAttrs("data-n", "data-k").Matching(regexp.MustCompile(`^[0-9]{1,10}$`)).OnElements("a", "li", "button")
	p.AllowAttrs("data-message").Matching(regexp.MustCompile(`^[0-9]{1,20}$`)).OnElements("button")
	// GFM task lists: goldmark emits disabled checkboxes; nothing else may produce an input.
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^checkbox$`)).OnElements("input")
	p.AllowAttrs("checked", "disabled").Matching(regexp.MustCompile(`^$`)).OnElements("input")
	p.AllowAttrs("target").Matching(regexp.MustCompile(`^_blank$`)).OnElements("a")
	p.AllowAttrs("rel").Matching(regexp.MustCompile(`^(noopener|noreferrer)( (noopener|noreferrer))*$`)).OnElements("a")
	return p
}

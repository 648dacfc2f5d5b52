package tools

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/lang/cjk"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	"github.com/blevesearch/bleve/v2/analysis/token/porter"
	"github.com/blevesearch/bleve/v2/analysis/token/stop"
	unicodetok "github.com/blevesearch/bleve/v2/analysis/tokenizer/unicode"
	"github.com/blevesearch/bleve/v2/analysis/tokenmap"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"
	"github.com/microcosm-cc/bluemonday"

	"github.com/citegate/citegate/internal/textseg"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

//go:embed corpus/*.md
var sampleCorpus embed.FS

// Limits of the local corpus.
const (
	maxCorpusFileBytes = 8 << 20 // one document
	maxPassageRunes    = 500     // the excerpt a search result carries
	maxCorpusResults   = 50
	analyzerName       = "citegate_cjk_en"
	// titleBoost weights the title field. A title is so short that bleve's field-length norm
	// already makes any title hit score high; below 1 it keeps one common word in a title (say
	// "申请") from outranking a body full of the query's rare words. The body field repeats the
	// title, so title words still count twice.
	titleBoost = 0.7
)

// Doc is one document of the local knowledge corpus. Text is its readable plain text (without the
// title); URL is absolute: publicURL + "/kb/" + slug.
type Doc struct {
	Slug, Title, Text, URL string
}

// corpusDoc is a Doc with what the HTTP pages and passage selection need.
type corpusDoc struct {
	Doc
	body      template.HTML // sanitised HTML of the document body
	showTitle bool          // the body has no <h1> of its own
	blocks    []block       // the structural lines of the text (headings, items, table rows)
	units     []unit        // the blocks split into sentences where too long, for passage selection
}

// unit is a block of a document's text (or a sentence of a long block) with its analysed terms.
// section and header point at the units a passage starting here must repeat to make sense: the
// heading it stands under and, for a table row, its table's header.
type unit struct {
	text    string
	kind    int
	runes   int
	section int // index of the governing heading unit, -1 if none
	header  int // for a table row: index of its table's header unit, -1 if none
	terms   map[string]struct{}
	english bool // the unit reads as English: Chinese query terms in it are a quoted title at most
}

// Corpus is the local knowledge corpus: documents in memory, a bleve in-memory index over their
// titles and bodies, and the pages under /kb/. It is safe for concurrent use after LoadCorpus.
type Corpus struct {
	base     *url.URL // publicURL without a trailing slash
	docs     []*corpusDoc
	bySlug   map[string]*corpusDoc
	index    bleve.Index
	analyzer analysis.Analyzer
	idf      map[string]float64 // term → inverse unit frequency, for passage scoring
	closed   atomic.Bool
	// Skipped lists the files that were left out because they hold no text; the caller says so.
	Skipped []string
}

// LoadCorpus reads the documents of dir — Markdown (.md, .markdown), HTML (.html, .htm) and text
// (.txt), recursively, skipping hidden files — and indexes them. dir "" loads the bundled sample
// corpus. publicURL is the gateway's public base URL; document URLs are publicURL + "/kb/" + slug.
func LoadCorpus(dir string, publicURL string) (*Corpus, error) {
	base, err := parsePublicURL(publicURL)
	if err != nil {
		return nil, err
	}
	var fsys fs.FS
	where := dir
	if dir == "" {
		sub, err := fs.Sub(sampleCorpus, "corpus")
		if err != nil {
			return nil, fmt.Errorf("corpus: bundled sample: %w", err)
		}
		fsys, where = sub, "bundled sample corpus"
	} else {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("corpus: cannot read %s: %w", dir, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("corpus: %s is not a directory", dir)
		}
		fsys = os.DirFS(dir)
	}
	c := &Corpus{base: base, bySlug: make(map[string]*corpusDoc)}
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("corpus: cannot read %s: %w", path.Join(where, p), err)
		}
		name := d.Name()
		if p != "." && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || docKind(name) == "" {
			return nil
		}
		return c.loadFile(fsys, p, where)
	})
	if err != nil {
		return nil, err
	}
	if len(c.docs) == 0 {
		return nil, fmt.Errorf("corpus: no documents (.md, .markdown, .html, .htm, .txt) in %s", where)
	}
	if err := c.buildIndex(); err != nil {
		return nil, err
	}
	return c, nil
}

func parsePublicURL(publicURL string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(publicURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("corpus: public URL %q must be an absolute http(s) URL", publicURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u, nil
}

func docKind(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".md", ".markdown":
		return "md"
	case ".html", ".htm":
		return "html"
	case ".txt":
		return "txt"
	}
	return ""
}

// loadFile reads and converts one document and adds it to c.docs.
func (c *Corpus) loadFile(fsys fs.FS, p, where string) error {
	f, err := fsys.Open(p)
	if err != nil {
		return fmt.Errorf("corpus: cannot read %s: %w", path.Join(where, p), err)
	}
	defer f.Close()
	raw, err := readLimited(f, maxCorpusFileBytes)
	if err != nil {
		return fmt.Errorf("corpus: cannot read %s: %w", path.Join(where, p), err)
	}
	kind := docKind(p)
	fallbackTitle := titleFromName(p)
	var d *corpusDoc
	switch kind {
	case "md":
		d, err = markdownDoc(toUTF8(raw, "text/markdown", false), fallbackTitle)
	case "html":
		d, err = htmlDoc(toUTF8(raw, "text/html", true), fallbackTitle)
	default:
		d = textDoc(toUTF8(raw, "text/plain", false), fallbackTitle)
	}
	if err != nil {
		return fmt.Errorf("corpus: %s: %w", path.Join(where, p), err)
	}
	if strings.TrimSpace(d.Text) == "" {
		c.Skipped = append(c.Skipped, path.Join(where, p))
		return nil
	}
	d.Slug = c.uniqueSlug(slugify(strings.TrimSuffix(p, path.Ext(p))))
	d.URL = c.docURL(d.Slug)
	c.docs = append(c.docs, d)
	c.bySlug[d.Slug] = d
	return nil
}

func readLimited(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

// markdownDoc converts a Markdown document. Its title is the first line when that is a "# "
// heading; raw HTML inside the Markdown is not rendered (goldmark's default), so pages stay safe.
func markdownDoc(src, fallbackTitle string) (*corpusDoc, error) {
	src = strings.TrimPrefix(src, "\uFEFF")
	title := fallbackTitle
	trimmed := strings.TrimLeft(src, " \t\r\n")
	first, rest, _ := strings.Cut(trimmed, "\n")
	if t, ok := strings.CutPrefix(strings.TrimSpace(first), "# "); ok && strings.TrimSpace(t) != "" {
		title = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(t), "#"))
		src = rest
	}
	var buf bytes.Buffer
	if err := markdown.Convert([]byte(src), &buf); err != nil {
		return nil, fmt.Errorf("markdown: %w", err)
	}
	body := sanitizer.SanitizeBytes(buf.Bytes())
	return &corpusDoc{Doc: Doc{Title: title, Text: fragmentText(body)}, body: template.HTML(body), showTitle: true, blocks: docBlocks(body)}, nil
}

var sanitizer = bluemonday.UGCPolicy()

// htmlDoc converts an HTML document: the title is <title> (else the first <h1>), the body is
// sanitised with bluemonday before it is shown or indexed.
func htmlDoc(src, fallbackTitle string) (*corpusDoc, error) {
	root, err := html.Parse(strings.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("html: %w", err)
	}
	title := strings.TrimSpace(nodeText(findElement(root, atom.Title)))
	h1 := findElement(root, atom.H1)
	if title == "" {
		title = strings.TrimSpace(nodeText(h1))
	}
	if title == "" {
		title = fallbackTitle
	}
	var inner bytes.Buffer
	if body := findElement(root, atom.Body); body != nil {
		for c := body.FirstChild; c != nil; c = c.NextSibling {
			if err := html.Render(&inner, c); err != nil {
				return nil, fmt.Errorf("html: %w", err)
			}
		}
	}
	clean := sanitizer.SanitizeBytes(inner.Bytes())
	return &corpusDoc{Doc: Doc{Title: cleanText(title), Text: fragmentText(clean)}, body: template.HTML(clean), showTitle: h1 == nil, blocks: docBlocks(clean)}, nil
}

// textDoc converts a plain-text document; a short first line is its title.
func textDoc(src, fallbackTitle string) *corpusDoc {
	text := cleanText(strings.TrimPrefix(src, "\uFEFF"))
	title := fallbackTitle
	if first, rest, _ := strings.Cut(text, "\n"); utf8.RuneCountInString(first) <= 80 && strings.TrimSpace(rest) != "" {
		title, text = strings.TrimSpace(first), strings.TrimSpace(rest)
	}
	var b strings.Builder
	for _, para := range strings.Split(text, "\n\n") {
		b.WriteString("<p>")
		b.WriteString(strings.ReplaceAll(template.HTMLEscapeString(para), "\n", "<br>\n"))
		b.WriteString("</p>\n")
	}
	return &corpusDoc{Doc: Doc{Title: title, Text: text}, body: template.HTML(b.String()), showTitle: true}
}

// fragmentText is the readable text of an HTML fragment.
func fragmentText(fragment []byte) string {
	nodes, err := html.ParseFragment(bytes.NewReader(fragment), &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body})
	if err != nil {
		return ""
	}
	root := &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div}
	for _, n := range nodes {
		root.AppendChild(n)
	}
	return htmlText(root)
}

func findElement(n *html.Node, a atom.Atom) *html.Node {
	if n == nil {
		return nil
	}
	if n.Type == html.ElementNode && n.DataAtom == a {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := findElement(c, a); f != nil {
			return f
		}
	}
	return nil
}

func nodeText(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return spaceRun.ReplaceAllString(strings.Join(strings.Fields(b.String()), " "), " ")
}

// titleFromName turns "guides/vpn-access.md" into "vpn access".
func titleFromName(p string) string {
	name := strings.TrimSuffix(path.Base(p), path.Ext(p))
	return strings.TrimSpace(strings.NewReplacer("-", " ", "_", " ").Replace(name))
}

// slugify keeps letters (any script) and digits, lower-cases ASCII, and turns everything else —
// path separators included — into single dashes.
func slugify(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		return "doc"
	}
	return out
}

// uniqueSlug appends -2, -3, … when two files map to the same slug, so no document is lost.
func (c *Corpus) uniqueSlug(s string) string {
	if _, taken := c.bySlug[s]; !taken {
		return s
	}
	for i := 2; ; i++ {
		cand := fmt.Sprintf("%s-%d", s, i)
		if _, taken := c.bySlug[cand]; !taken {
			return cand
		}
	}
}

func (c *Corpus) docURL(slug string) string {
	u := *c.base
	return u.String() + "/kb/" + url.PathEscape(slug)
}

// IndexURL is the absolute URL of the corpus index page.
func (c *Corpus) IndexURL() string {
	u := *c.base
	return u.String() + "/kb/"
}

// Close releases the search index. A closed corpus still serves pages and lookups; Search then
// fails. A corpus that lives as long as the process need not be closed. Closing it again does
// nothing.
func (c *Corpus) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if err := c.index.Close(); err != nil {
		return fmt.Errorf("corpus: close: %w", err)
	}
	return nil
}

// open implements stableSearcher: the corpus is indexed once, in LoadCorpus, and its results for a
// query stay the same until Close.
func (c *Corpus) open() bool { return !c.closed.Load() }

// Len is the number of documents.
func (c *Corpus) Len() int { return len(c.docs) }

// Docs returns the documents in load order.
func (c *Corpus) Docs() []Doc {
	out := make([]Doc, len(c.docs))
	for i, d := range c.docs {
		out[i] = d.Doc
	}
	return out
}

// buildIndex indexes every document in a bleve in-memory index and prepares passage scoring.
func (c *Corpus) buildIndex() error {
	im := bleve.NewIndexMapping()
	// The CJK bigram filter turns runs of Han characters into overlapping pairs, so Chinese needs
	// no dictionary; the English filters before it let "passwords" match "password".
	if err := im.AddCustomTokenMap("citegate_zh_question_words", map[string]interface{}{
		"type": tokenmap.Name, "tokens": zhQuestionWords(),
	}); err != nil {
		return fmt.Errorf("corpus: analyzer: %w", err)
	}
	if err := im.AddCustomTokenFilter("citegate_stop_zh", map[string]interface{}{
		"type": stop.Name, "stop_token_map": "citegate_zh_question_words",
	}); err != nil {
		return fmt.Errorf("corpus: analyzer: %w", err)
	}
	if err := im.AddCustomAnalyzer(analyzerName, map[string]interface{}{
		"type":      custom.Name,
		"tokenizer": unicodetok.Name,
		"token_filters": []string{
			cjk.WidthName, lowercase.Name, en.PossessiveName, en.StopName, porter.Name, cjk.BigramName, "citegate_stop_zh",
		},
	}); err != nil {
		return fmt.Errorf("corpus: analyzer: %w", err)
	}
	im.DefaultAnalyzer = analyzerName
	dm := bleve.NewDocumentMapping()
	for _, field := range []string{"title", "body"} {
		fm := bleve.NewTextFieldMapping()
		fm.Analyzer = analyzerName
		fm.Store = false
		fm.IncludeInAll = false
		dm.AddFieldMappingsAt(field, fm)
	}
	im.DefaultMapping = dm
	idx, err := newMemIndex(im)
	if err != nil {
		return fmt.Errorf("corpus: index: %w", err)
	}
	batch := idx.NewBatch()
	for _, d := range c.docs {
		if err := batch.Index(d.Slug, map[string]string{"title": d.Title, "body": bodyOf(d)}); err != nil {
			_ = idx.Close()
			return fmt.Errorf("corpus: index %s: %w", d.Slug, err)
		}
	}
	if err := idx.Batch(batch); err != nil {
		_ = idx.Close()
		return fmt.Errorf("corpus: index: %w", err)
	}
	c.index = idx
	c.analyzer = im.AnalyzerNamed(analyzerName)
	if c.analyzer == nil {
		_ = idx.Close()
		return errors.New("corpus: analyzer missing")
	}

	df := make(map[string]int)
	total := 0
	for _, d := range c.docs {
		if len(d.blocks) == 0 {
			for _, line := range strings.Split(d.Text, "\n") {
				d.blocks = append(d.blocks, block{kind: unitText, text: line})
			}
		}
		d.units = c.splitUnits(d.blocks)
		for _, u := range d.units {
			total++
			for t := range u.terms {
				df[t]++
			}
		}
	}
	c.idf = make(map[string]float64, len(df))
	for t, n := range df {
		c.idf[t] = math.Log(1 + float64(total)/float64(n))
	}
	return nil
}

// zhQuestionWords is textseg.ZhQuestionWords as bleve's token map wants it.
func zhQuestionWords() []interface{} {
	out := make([]interface{}, len(textseg.ZhQuestionWords))
	for i, w := range textseg.ZhQuestionWords {
		out[i] = w
	}
	return out
}

// terms analyses s into its distinct index terms.
func (c *Corpus) terms(s string) map[string]struct{} {
	out := make(map[string]struct{})
	for _, tok := range c.analyzer.Analyze([]byte(s)) {
		out[string(tok.Term)] = struct{}{}
	}
	return out
}

// splitUnits turns blocks into units, splitting blocks longer than a passage into sentences
// (hard-cut when a sentence alone is too long), and links each unit to its heading and table header.
func (c *Corpus) splitUnits(blocks []block) []unit {
	var out []unit
	section, header := -1, -1
	add := func(kind int, s string) {
		s = strings.TrimSpace(s)
		if s == "" {
			return
		}
		u := unit{text: s, kind: kind, runes: utf8.RuneCountInString(s), section: section, header: -1, terms: c.terms(s), english: !textseg.ReadsAsChinese(s)}
		switch kind {
		case unitHeading:
			u.section = -1
			section, header = len(out), -1
		case unitTableHeader:
			header = len(out)
		case unitTableRow:
			u.header = header
		default:
			header = -1
		}
		out = append(out, u)
	}
	for _, b := range blocks {
		if utf8.RuneCountInString(b.text) <= maxPassageRunes {
			add(b.kind, b.text)
			continue
		}
		for _, sent := range textseg.Sentences(b.text) {
			for utf8.RuneCountInString(sent) > maxPassageRunes {
				head, _ := truncateRunes(sent, maxPassageRunes)
				add(b.kind, head)
				sent = sent[len(head):]
			}
			add(b.kind, sent)
		}
	}
	return out
}

// Search ranks documents for query with bleve (title boosted over body) and returns, for each hit,
// the document's best-matching passage as content. An empty result is not an error.
func (c *Corpus) Search(ctx context.Context, q string, max int) ([]SearchResult, error) {
	q = strings.TrimSpace(q)
	if q == "" {
		return nil, errors.New("corpus: empty query")
	}
	if max <= 0 {
		max = DefaultMaxResults
	}
	if max > maxCorpusResults {
		max = maxCorpusResults
	}
	title := query.NewMatchQuery(q)
	title.SetField("title")
	title.Analyzer = analyzerName
	title.SetBoost(titleBoost)
	body := query.NewMatchQuery(q)
	body.SetField("body")
	body.Analyzer = analyzerName
	req := bleve.NewSearchRequestOptions(query.NewDisjunctionQuery([]query.Query{title, body}), max, 0, false)
	res, err := c.index.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("corpus: search: %w", err)
	}
	qterms := c.terms(q)
	out := make([]SearchResult, 0, len(res.Hits))
	for _, h := range res.Hits {
		d, ok := c.bySlug[h.ID]
		if !ok {
			continue
		}
		out = append(out, SearchResult{Title: d.Title, URL: d.URL, Content: c.bestPassage(d, qterms)})
	}
	return out, nil
}

// bestPassage picks the window of consecutive units (at most maxPassageRunes) that covers the
// query's terms best, weighting rare terms higher; ties go to the earlier window, and a document
// that matched only by title yields its opening. A window that starts inside a section repeats the
// section's heading, and one that starts inside a table repeats the table's header, so table rows
// never reach the reader without their columns.
func (c *Corpus) bestPassage(d *corpusDoc, qterms map[string]struct{}) string {
	// Only query terms that occur somewhere in the corpus can score.
	type weighted struct {
		term string
		idf  float64
		han  bool
	}
	terms := make([]weighted, 0, len(qterms))
	for t := range qterms {
		if w, ok := c.idf[t]; ok {
			terms = append(terms, weighted{t, w, textseg.HasHan(t)})
		}
	}
	// A fixed order keeps floating-point sums, and so tie-breaks, deterministic.
	sort.Slice(terms, func(i, j int) bool { return terms[i].term < terms[j].term })
	// Which query terms each unit holds, in term order, worked out once: a unit lies in many of
	// the overlapping windows below. The sums below add the same values in the same order as a
	// scan of every term of every unit of every window would.
	hits := make([][]int, len(d.units))
	for k := range d.units {
		for n, w := range terms {
			if _, hit := d.units[k].terms[w.term]; hit {
				hits[k] = append(hits[k], n)
			}
		}
	}
	maxIDF := 0.0 // every window scores at least one unit, so this is the maximum over all terms
	for _, w := range terms {
		maxIDF = max(maxIDF, w.idf)
	}
	seen := make([]int, len(terms))
	var best []int
	bestScore := -1.0
	window := make([]int, 0, 16)
	for i := range d.units {
		clear(seen)
		// The repeated heading and table header are shown but not scored: the window that starts
		// at the heading itself scores them, and ties go to the earlier window.
		window = append(window[:0], c.passagePrefix(d, i)...)
		prefix := len(window)
		score, size := 0.0, 0
		for _, k := range window {
			size += d.units[k].runes + 1
		}
		for j := i; j < len(d.units); j++ {
			add := d.units[j].runes
			if len(window) > 0 {
				add++ // the newline joining units
			}
			if size+add > maxPassageRunes && j > i {
				break
			}
			size += add
			window = append(window, j)
		}
		// A heading whose section did not fit says nothing: it would only score the window for
		// words the reader then does not find in it.
		for len(window) > prefix+1 && d.units[window[len(window)-1]].kind == unitHeading {
			window = window[:len(window)-1]
		}
		for _, k := range window[prefix:] {
			for _, n := range hits[k] {
				w := terms[n]
				// A Chinese name quoted in an English line ("the Chinese guide 域账号密码重置") does not
				// make it the passage a Chinese query term asks for.
				if w.han && d.units[k].english {
					continue
				}
				switch seen[n] {
				case 0:
					score += w.idf
				case 1:
					// A second mention helps a little; more do not, or a long section that merely
					// repeats the topic word would beat the one that answers.
					score += 0.1 * w.idf
				}
				seen[n]++
			}
		}
		// A window that opens with a heading naming the question's terms is that section.
		if d.units[i].kind == unitHeading {
			for _, n := range hits[i] {
				score += 0.3 * terms[n].idf
			}
		}
		if last := window[len(window)-1]; last+1 < len(d.units) && d.units[last+1].kind == unitTableRow &&
			(d.units[last].kind == unitTableRow || d.units[last].kind == unitTableHeader) {
			score -= 0.15 * maxIDF // the window cuts a table: the rows it leaves out may be the answer
		}
		if i > 0 && (d.units[i].kind == unitItem && d.units[i-1].kind == unitItem ||
			d.units[i].kind == unitTableRow && d.units[i-1].kind == unitTableRow) {
			score -= 0.15 * maxIDF // it starts in the middle of a list or table: steps 1–3 matter too
		}
		// Sums of the same terms in another order differ in the last bits; only a real gain wins.
		if score > bestScore+1e-9 {
			best, bestScore = append(best[:0], window...), score
		}
	}
	parts := make([]string, 0, len(best))
	for _, k := range best {
		parts = append(parts, d.units[k].text)
	}
	s, _ := truncateRunes(strings.Join(parts, "\n"), maxPassageRunes)
	return s
}

// passagePrefix lists the units a passage starting at unit i repeats first: the heading of its
// section and, inside a table, the table's header.
func (c *Corpus) passagePrefix(d *corpusDoc, i int) []int {
	u := d.units[i]
	var out []int
	if u.section >= 0 && u.kind != unitHeading {
		out = append(out, u.section)
	}
	if u.kind == unitTableRow && u.header >= 0 {
		out = append(out, u.header)
	}
	return out
}

// Lookup maps a URL under publicURL + "/kb/" to its document. Scheme and host compare
// case-insensitively, default ports are ignored, and query and fragment do not matter.
func (c *Corpus) Lookup(rawURL string) (Doc, bool) {
	slug, ok := c.slugOf(rawURL)
	if !ok || slug == "" {
		return Doc{}, false
	}
	d, ok := c.bySlug[slug]
	if !ok {
		return Doc{}, false
	}
	return d.Doc, true
}

// slugOf reports whether rawURL lies under the corpus' /kb/ path and returns the slug part ("" for
// the index page).
func (c *Corpus) slugOf(rawURL string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil || !strings.EqualFold(u.Scheme, c.base.Scheme) || !sameHost(u, c.base) {
		return "", false
	}
	rest, ok := strings.CutPrefix(u.Path, c.base.Path+"/kb/")
	if !ok {
		if u.Path == c.base.Path+"/kb" {
			return "", true
		}
		return "", false
	}
	return strings.TrimSuffix(rest, "/"), true
}

func sameHost(a, b *url.URL) bool {
	return strings.EqualFold(a.Hostname(), b.Hostname()) && effectivePort(a) == effectivePort(b)
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// sortedDocs returns the documents ordered by title, for the index page.
func (c *Corpus) sortedDocs() []*corpusDoc {
	out := append([]*corpusDoc(nil), c.docs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Title < out[j].Title })
	return out
}

// bodyOf is the indexed body: title and text.
func bodyOf(d *corpusDoc) string { return d.Title + "\n" + d.Text }

// newMemIndex creates a scorch index without a path: scorch then keeps its segments in memory
// only. It builds and searches faster than bleve.NewMemOnly's upsidedown/gtreap index.
func newMemIndex(im *mapping.IndexMappingImpl) (bleve.Index, error) {
	return bleve.NewUsing("", im, scorch.Name, scorch.Name, nil)
}

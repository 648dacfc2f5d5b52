package markdown

import (
	"html"
	"strconv"
	"strings"
	"time"

	"github.com/citegate/citegate/citations"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// KindCitation is the goldmark node kind of a citation marker.
var KindCitation = ast.NewNodeKind("Citation")

// CitationNode is one [^n^] marker found in ordinary inline text (never in code: goldmark hands code
// spans and code blocks to their own parsers, so this node cannot appear there).
type CitationNode struct {
	ast.BaseInline
	// N is the registry number written by the model.
	N int
	// K is the display number (1..k); 0 until the transformer resolved it.
	K int
	// Anchor and Occurrence make the superscript's id unique within the page.
	Anchor     string
	Occurrence int
	// sups, when set, collects the superscript's HTML while the output gets supPlaceholder in its
	// place (see renderState.sups).
	sups *[]string
}

// Kind implements ast.Node.
func (n *CitationNode) Kind() ast.NodeKind { return KindCitation }

// Dump implements ast.Node.
func (n *CitationNode) Dump(source []byte, level int) {
	ast.DumpHelper(n, source, level, map[string]string{"N": strconv.Itoa(n.N), "K": strconv.Itoa(n.K)}, nil)
}

// citationParser recognises a complete marker at a '['. It uses citations.Markers so the grammar
// (including the digit bound) is exactly the one Extract, Strip and the Stripper use.
type citationParser struct{}

// Trigger includes '!' because goldmark's link parser would otherwise read "![^1^]" as the start of
// an image and leave the marker as text, while Verify counts it.
func (citationParser) Trigger() []byte { return []byte{'[', '!'} }

func (citationParser) Parse(_ ast.Node, block text.Reader, _ parser.Context) ast.Node {
	line, seg := block.PeekLine()
	if len(line) > 1 && line[0] == '!' {
		limit := min(len(line), citations.MaxDigits+5)
		if ms := citations.Markers(string(line[1:limit])); len(ms) == 0 || ms[0].Start != 0 {
			return nil
		}
		// The '!' is plain text; the marker after it is parsed at its '['.
		block.Advance(1)
		return ast.NewTextSegment(seg.WithStop(seg.Start + 1))
	}
	// The longest marker is "[^" + MaxDigits digits + "^]"; looking further is pointless.
	limit := min(len(line), citations.MaxDigits+4)
	ms := citations.Markers(string(line[:limit]))
	if len(ms) == 0 || ms[0].Start != 0 {
		return nil
	}
	block.Advance(ms[0].End)
	return &CitationNode{N: ms[0].N}
}

// renderState is the per-document data the transformer needs; it travels in the parser.Context
// so one goldmark instance can serve concurrent renders.
type renderState struct {
	valid  []citations.Citation // usable citations, ordered by N
	anchor string
	allow  func(string) bool
	// Results: links hidden in the tree, citations a superscript points to.
	hidden int
	cited  []citations.Citation
	// plainCode turns syntax highlighting off (Options.PlainCode); highlighted counts the code
	// bytes highlighted so far, against maxHighlightTotal.
	plainCode   bool
	highlighted int
	// hlDeadline is when highlighting must stop (set at the first highlighted block, see
	// highlightTime); hlOver is set once it passed. clock is Options.Now.
	hlDeadline time.Time
	hlOver     bool
	clock      func() time.Time
	// placeholders has the superscripts rendered as supPlaceholder, their HTML collected in sups
	// in document order, so the sanitiser does not spend its time on markup this package wrote
	// and that it would pass unchanged (see spliceSups).
	placeholders bool
	sups         []string
}

func (st *renderState) now() time.Time {
	if st.clock != nil {
		return st.clock()
	}
	return time.Now()
}

var stateKey = parser.NewContextKey()

// citationTransformer resolves display numbers, removes markers that point at no citation and moves
// markers out of link text (a superscript is itself a link and links must not nest).
type citationTransformer struct{}

func (citationTransformer) Transform(doc *ast.Document, _ text.Reader, pc parser.Context) {
	st, _ := pc.Get(stateKey).(*renderState)
	if st != nil {
		// The code renderer reads its budget from here (renderer funcs see the tree, not pc).
		doc.AddMeta(stateMetaKey, st)
	}
	var nodes []*CitationNode
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if c, ok := n.(*CitationNode); ok && entering {
			nodes = append(nodes, c)
		}
		return ast.WalkContinue, nil
	})
	// Only citations a marker outside code points to are listed and numbered, so the sources
	// section never shows an entry without a superscript.
	var display map[int]int
	if st != nil {
		present := map[int]bool{}
		for _, c := range nodes {
			present[c.N] = true
		}
		for _, c := range st.valid {
			if present[c.N] {
				st.cited = append(st.cited, c)
			}
		}
		display = citations.DisplayNumbers(st.cited)
	}
	occurrences := map[int]int{}
	// lastMoved remembers, per link, the node after which the next moved marker goes, so several
	// markers in one link keep their order.
	lastMoved := map[ast.Node]ast.Node{}
	for _, c := range nodes {
		k := display[c.N]
		if k == 0 {
			c.Parent().RemoveChild(c.Parent(), c)
			continue
		}
		c.K = k
		c.Anchor = st.anchor
		if st.placeholders {
			c.sups = &st.sups
		}
		occurrences[k]++
		c.Occurrence = occurrences[k]
		if link := outermostLink(c); link != nil {
			after, ok := lastMoved[link]
			if !ok {
				after = link
			}
			c.Parent().RemoveChild(c.Parent(), c)
			link.Parent().InsertAfter(link.Parent(), after, c)
			lastMoved[link] = c
		}
	}
}

func outermostLink(n ast.Node) ast.Node {
	var found ast.Node
	for p := n.Parent(); p != nil; p = p.Parent() {
		switch p.Kind() {
		case ast.KindLink, ast.KindImage, ast.KindAutoLink:
			found = p
		}
	}
	return found
}

// citationRenderer writes the superscript of DESIGN §4 / the gateway contract.
type citationRenderer struct{}

func (citationRenderer) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(KindCitation, renderCitation)
	reg.Register(ast.KindHTMLBlock, renderHTMLBlockAsText)
	reg.Register(ast.KindRawHTML, renderRawHTMLAsText)
}

// renderHTMLBlockAsText shows HTML the model wrote as text instead of dropping it: a reader loses
// nothing (an answer explaining HTML stays readable) and no markup of the model reaches the page.
// Markers inside it were never parsed, so they are stripped like everywhere text is shown plainly.
func renderHTMLBlockAsText(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.HTMLBlock)
	if !entering {
		return ast.WalkContinue, nil
	}
	var raw []byte
	for i := range n.Lines().Len() {
		line := n.Lines().At(i)
		raw = append(raw, line.Value(source)...)
	}
	if n.HasClosure() {
		raw = append(raw, n.ClosureLine.Value(source)...)
	}
	body := strings.TrimRight(citations.Strip(string(raw)), "\n")
	_, _ = w.WriteString("<p>" + strings.ReplaceAll(html.EscapeString(body), "\n", "<br>\n") + "</p>\n")
	return ast.WalkContinue, nil
}

func renderRawHTMLAsText(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkSkipChildren, nil
	}
	n := node.(*ast.RawHTML)
	var raw []byte
	for i := range n.Segments.Len() {
		seg := n.Segments.At(i)
		raw = append(raw, seg.Value(source)...)
	}
	_, _ = w.WriteString(html.EscapeString(citations.Strip(string(raw))))
	return ast.WalkSkipChildren, nil
}

func renderCitation(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkSkipChildren, nil
	}
	c := node.(*CitationNode)
	if c.K == 0 {
		return ast.WalkSkipChildren, nil
	}
	sup := supHTML(c.Anchor, c.K, c.Occurrence, c.N)
	if c.sups != nil {
		*c.sups = append(*c.sups, sup)
		sup = supPlaceholder
	}
	_, _ = w.WriteString(sup)
	return ast.WalkSkipChildren, nil
}

// supHTML is the superscript of DESIGN §4 / the gateway contract for the occurrence-th marker of
// citation n, shown as k; anchor (Options.anchor's, or "" for none) prefixes its ids.
func supHTML(anchor string, k, occurrence, n int) string {
	ks := strconv.Itoa(k)
	id := ""
	if anchor != "" {
		id = ` id="` + anchor + `-ref-` + ks + `-` + strconv.Itoa(occurrence) + `"`
	}
	return `<sup class="cite-ref"><a` + id + ` href="#` + anchor + `-src-` + ks + `" data-n="` + strconv.Itoa(n) + `" data-k="` + ks + `">` + ks + `</a></sup>`
}

// citationExtension plugs the parser, transformer and renderer into goldmark.
type citationExtension struct{}

func (citationExtension) Extend(m goldmark.Markdown) {
	m.Parser().AddOptions(
		// Before the link parser (200), so "[^1^]" never starts a link label.
		parser.WithInlineParsers(util.Prioritized(citationParser{}, 150)),
		parser.WithASTTransformers(util.Prioritized(citationTransformer{}, 100)),
	)
	m.Renderer().AddOptions(renderer.WithNodeRenderers(
		util.Prioritized(citationRenderer{}, 100),
		util.Prioritized(codeRenderer{}, 100),
	))
}

// linkTransformer applies the link rule to the tree goldmark parsed (so code is exactly what the
// renderer shows as code): a link or image whose destination is not allowed is replaced by its
// text, an autolink (also a linkified bare URL) by citations.HiddenLinkNotice. It runs before the
// citation transformer, so markers of an unwrapped link simply stay in place.
type linkTransformer struct{}

func (linkTransformer) Transform(doc *ast.Document, reader text.Reader, pc parser.Context) {
	st, _ := pc.Get(stateKey).(*renderState)
	if st == nil {
		return
	}
	source := reader.Source()
	var links []ast.Node
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			switch n.Kind() {
			case ast.KindLink, ast.KindImage, ast.KindAutoLink:
				links = append(links, n)
			}
		}
		return ast.WalkContinue, nil
	})
	// Innermost last: unwrapping an outer link first keeps the inner one in the tree for its turn.
	for _, n := range links {
		switch l := n.(type) {
		case *ast.Link:
			if !allowed(st.allow, string(l.Destination)) {
				unwrap(l)
				st.hidden++
			}
		case *ast.Image:
			if !allowed(st.allow, string(l.Destination)) {
				unwrap(l)
				st.hidden++
			}
		case *ast.AutoLink:
			if l.AutoLinkType == ast.AutoLinkEmail {
				continue // an e-mail address is not a web address the rule is about
			}
			label := string(l.Label(source))
			ok := allowed(st.allow, string(l.URL(source)))
			if !ok && l.Protocol != nil {
				ok = allowed(st.allow, "https://"+label)
			}
			if !ok {
				l.Parent().ReplaceChild(l.Parent(), l, ast.NewString([]byte(citations.HiddenLinkNotice)))
				st.hidden++
			}
		}
	}
}

func allowed(allow func(string) bool, u string) bool {
	n, ok := citations.NormalizeURL(u)
	return ok && allow != nil && allow(n)
}

// unwrap replaces n by its children.
func unwrap(n ast.Node) {
	parent := n.Parent()
	if parent == nil {
		return
	}
	for c := n.FirstChild(); c != nil; {
		next := c.NextSibling()
		parent.InsertBefore(parent, n, c)
		c = next
	}
	parent.RemoveChild(parent, n)
}

// linkExtension plugs linkTransformer in before the citation transformer.
type linkExtension struct{}

func (linkExtension) Extend(m goldmark.Markdown) {
	m.Parser().AddOptions(parser.WithASTTransformers(util.Prioritized(linkTransformer{}, 200)))
}

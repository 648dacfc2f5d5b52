package markdown

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/util"
)

// Syntax highlighting is done here, on the server, with chroma: a fenced code block whose info
// string names a language chroma knows is tokenised and written as <span class="…"> runs inside
// <pre class="chroma"><code class="language-x">. Only CSS classes are written, never inline
// styles, so the sanitiser can keep a short, fixed list of classes and the page's stylesheets
// (HighlightCSS: a light and a dark palette) decide the colours.
//
// goldmark-highlighting would do the same, but it also reads options from the info string
// ("{linenos=true style=monokai}"), which here is text a model wrote, and it has no notion of a
// render budget; this renderer is the few lines of it that are needed.

const (
	// maxHighlightBlock bounds the size of one highlighted block. chroma's lexers are regular
	// expressions (regexp2, backtracking, each match bounded by 250 ms only) and cost about 2 µs
	// of CPU per byte of code, adversarial or not (docs/benchmarks.md); a larger block is shown as
	// plain code, which costs a copy.
	maxHighlightBlock = 8 << 10
	// maxHighlightTotal bounds the code one answer may have highlighted in all (about 30 ms of
	// CPU, once: the gateway caches rendered answers); blocks past it are plain.
	maxHighlightTotal = 16 << 10
	// highlightTime bounds the wall time one render may spend highlighting. Some lexers go
	// quadratic on some input (Makefile on 8 KiB of "0x1e9.e-": seconds), so the token stream is
	// checked against this deadline and a block that runs out is shown plain, as are the blocks
	// after it. Ordinary code takes a fraction of it even on a busy machine.
	highlightTime = 50 * time.Millisecond
)

// highlightLanguages are the chroma lexers (by canonical name) used for highlighting: the
// languages answers commonly show, each measured at maxHighlightBlock against adversarial input
// (BenchmarkHighlightWorstCase). chroma knows hundreds more; their lexers are not measured, so
// their code stays plain.
var highlightLanguages = map[string]bool{
	"Go": true, "Python": true, "JavaScript": true, "TypeScript": true, "JSON": true, "YAML": true,
	"TOML": true, "INI": true, "Bash": true, "Bash Session": true, "PowerShell": true, "SQL": true,
	"HTML": true, "XML": true, "CSS": true, "Java": true, "Kotlin": true, "C": true, "C++": true,
	"C#": true, "Rust": true, "Swift": true, "PHP": true, "Ruby": true, "Lua": true,
	"markdown": true, "Diff": true, "Docker": true, "Makefile": true, "Protocol Buffer": true,
	"GraphQL": true, "Nginx configuration file": true, "HCL": true, "Terraform": true,
}

// langRE is what a language name must look like to be written into the class attribute (and what
// the sanitiser keeps as "language-…"): letters, digits, '_', '+', '-'.
var langRE = regexp.MustCompile(`^[\w+-]{1,32}$`)

// highlightFormatter writes tokens as class-only spans without a surrounding <pre>; the renderer
// writes its own <pre><code> so the language class stays on <code> as CommonMark renderers do.
var highlightFormatter = chromahtml.New(chromahtml.WithClasses(true), chromahtml.PreventSurroundingPre(true))

// codeRenderer renders fenced code blocks: highlighted when the language is known and the budgets
// allow, otherwise exactly as goldmark does (escaped text, language class kept).
type codeRenderer struct{}

func (codeRenderer) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindFencedCodeBlock, renderFencedCode)
}

// renderFencedCode writes one fenced code block. goldmark's renderer funcs get no parser context,
// so the highlighting budget is read from the document's renderState (docState).
func renderFencedCode(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	n := node.(*ast.FencedCodeBlock)
	var lang string
	if l := n.Language(source); l != nil && langRE.Match(l) {
		lang = string(l)
	}
	var code bytes.Buffer
	for i := range n.Lines().Len() {
		seg := n.Lines().At(i)
		code.Write(seg.Value(source))
	}
	st := docState(node)
	if lang != "" && st != nil && !st.plainCode && !st.hlOver && code.Len() <= maxHighlightBlock && st.highlighted+code.Len() <= maxHighlightTotal {
		st.highlighted += code.Len()
		out, ok, late := highlight(lang, code.String(), func() bool {
			// The deadline is set at the first look, after the first block's first token.
			if st.hlDeadline.IsZero() {
				st.hlDeadline = st.now().Add(highlightTime)
			}
			return st.now().After(st.hlDeadline)
		})
		st.hlOver = late
		if ok {
			_, _ = w.WriteString(`<pre class="chroma"><code class="language-` + lang + `">`)
			_, _ = w.WriteString(out)
			_, _ = w.WriteString("</code></pre>\n")
			return ast.WalkSkipChildren, nil
		}
	}
	_, _ = w.WriteString("<pre><code")
	if lang != "" {
		_, _ = w.WriteString(` class="language-` + lang + `"`)
	}
	_ = w.WriteByte('>')
	_, _ = w.WriteString(html.EscapeString(code.String()))
	_, _ = w.WriteString("</code></pre>\n")
	return ast.WalkSkipChildren, nil
}

// highlight tokenises code as lang; ok is false when chroma does not know the language, fails,
// or late() turned true before the last token (late then reports it), so the caller writes the
// block plain. chroma is foreign code run on model-written input: a panic in a lexer costs the
// colours of one block, not the answer.
func highlight(lang, code string, late func() bool) (out string, ok, wasLate bool) {
	lexer := lexers.Get(lang)
	if lexer == nil || !highlightLanguages[lexer.Config().Name] {
		return "", false, false
	}
	defer func() {
		if r := recover(); r != nil {
			out, ok = "", false
		}
	}()
	it, err := chroma.Coalesce(lexer).Tokenise(nil, code)
	if err != nil {
		return "", false, false
	}
	// The deadline is checked between tokens: a lexer that goes quadratic does so by spending
	// long on each of many tokens, so the check comes often enough.
	// The clock is first read after the first token: chroma compiles a lexer on first use (once
	// per process and language), which is not the input's fault.
	first := true
	bounded := func() chroma.Token {
		if !first && late != nil && late() {
			wasLate = true
			return chroma.EOF
		}
		first = false
		return it()
	}
	var b strings.Builder
	b.Grow(len(code) * 2)
	if err := highlightFormatter.Format(&b, styles.Fallback, bounded); err != nil || wasLate {
		return "", false, wasLate
	}
	return b.String(), true, false
}

// docState finds the renderState attached to the document n belongs to.
func docState(n ast.Node) *renderState {
	for p := n; p != nil; p = p.Parent() {
		if d, ok := p.(*ast.Document); ok {
			st, _ := d.Meta()[stateMetaKey].(*renderState)
			return st
		}
	}
	return nil
}

// stateMetaKey is where renderBody's transformer leaves the renderState in the document's meta map,
// the only per-document storage goldmark's renderer funcs can reach.
const stateMetaKey = "citegate.state"

// chromaClasses are the class names chroma writes for token types, the only span classes the
// sanitiser lets through besides this package's own.
func chromaClasses() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range chroma.StandardTypes {
		if c != "" && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// chromaClassRE matches exactly one chroma token class.
var chromaClassRE = regexp.MustCompile(`^(` + strings.Join(quoteAll(chromaClasses()), "|") + `)$`)

func quoteAll(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = regexp.QuoteMeta(s)
	}
	return out
}

// Highlight palettes: GitHub's light and dark styles, as chroma ships them.
const (
	lightStyle = "github"
	darkStyle  = "github-dark"
)

// HighlightCSS is the stylesheet for highlighted code: token colours of the light palette inside a
// prefers-color-scheme: light media query, and of the dark palette inside a dark one. Background,
// line-number and line-table rules are left out: the page's own code block style applies. The
// gateway serves it as a static file and a test keeps that file equal to this output.
func HighlightCSS() (string, error) {
	var b strings.Builder
	b.WriteString("/* Syntax highlighting (chroma classes). Generated by citations/markdown.HighlightCSS;\n" +
		"   regenerate with: go test ./gateway -run TestHighlightCSSUpToDate -update */\n")
	// Each palette sits in its own media query, so no rule of the light one (dark text on a
	// colour the dark one leaves alone) survives into dark mode. "light" also matches a browser
	// that states no preference.
	b.WriteString("@media (prefers-color-scheme: light) {\n")
	if err := writeTokenCSS(&b, lightStyle, "  "); err != nil {
		return "", err
	}
	b.WriteString("}\n@media (prefers-color-scheme: dark) {\n")
	if err := writeTokenCSS(&b, darkStyle, "  "); err != nil {
		return "", err
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// skipCSS are the chroma rules that style the wrapper or line numbers rather than tokens.
var skipCSS = []string{"/* Background */", "/* PreWrapper */", "/* Line", "/* CodeLine */"}

func writeTokenCSS(w io.Writer, name, indent string) error {
	style := styles.Get(name)
	if style == nil || style == styles.Fallback {
		return fmt.Errorf("markdown: chroma style %q is missing", name)
	}
	var raw bytes.Buffer
	f := chromahtml.New(chromahtml.WithClasses(true), chromahtml.WithCSSComments(true))
	if err := f.WriteCSS(&raw, style); err != nil {
		return fmt.Errorf("markdown: chroma css for %q: %w", name, err)
	}
	for line := range strings.SplitSeq(raw.String(), "\n") {
		if line == "" || slices.ContainsFunc(skipCSS, func(p string) bool { return strings.HasPrefix(line, p) }) {
			continue
		}
		// Drop the comment: the class names say enough and the file stays small.
		if i := strings.Index(line, "*/ "); strings.HasPrefix(line, "/*") && i > 0 {
			line = line[i+3:]
		}
		if _, err := io.WriteString(w, indent+line+"\n"); err != nil {
			return err
		}
	}
	return nil
}

package tools

import (
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// tokenText extracts the title and visible text of an HTML document with the tokenizer alone. It
// is the fallback for pages the tree builder refuses: html.Parse gives up on documents nested more
// than 512 elements deep (a limit that protects its recursive algorithms), and such a page must
// still reach the model as text, never as raw markup. The tokenizer keeps no stack of open
// elements, so it has no depth limit and runs in time linear in the input.
//
// It keeps what a reader sees: text outside <script>, <style>, <template>, <noscript>, <head>
// content other than <title>, and foreign <svg>/<math> islands; block-level elements and <br>
// become line breaks. Character references are decoded by the tokenizer.
func tokenText(src string) (title, text string) {
	z := html.NewTokenizer(strings.NewReader(src))
	var b, t strings.Builder
	// skip counts open elements whose content is invisible. Only their own end tags close them;
	// raw-text elements (script, style) need no nesting count since the tokenizer reads their
	// content as text up to the matching end tag.
	skip := map[atom.Atom]int{}
	skipping := func() bool {
		for _, n := range skip {
			if n > 0 {
				return true
			}
		}
		return false
	}
	inTitle := false
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			// io.EOF or a read error; the tokenizer never fails on malformed markup.
			return cleanText(t.String()), cleanText(b.String())
		case html.TextToken:
			if inTitle {
				t.Write(z.Text())
				continue
			}
			if !skipping() {
				b.Write(z.Text())
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			switch {
			case a == atom.Title:
				inTitle = tt == html.StartTagToken
				continue
			case a == atom.Body:
				// <body> implies the end of <head>, whose end tag is optional.
				skip[atom.Head] = 0
			case invisibleElement(a):
				if tt == html.StartTagToken {
					skip[a]++
				}
				continue
			}
			if breaksLine(a) {
				b.WriteByte('\n')
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			switch {
			case a == atom.Title:
				inTitle = false
				continue
			case invisibleElement(a):
				if skip[a] > 0 {
					skip[a]--
				}
				continue
			}
			if breaksLine(a) {
				b.WriteByte('\n')
			}
		}
	}
}

// invisibleElement reports elements whose content a reader never sees as page text.
func invisibleElement(a atom.Atom) bool {
	switch a {
	case atom.Head, atom.Script, atom.Style, atom.Template, atom.Noscript, atom.Svg, atom.Math,
		atom.Iframe, atom.Object, atom.Select, atom.Textarea:
		return true
	}
	return false
}

// breaksLine reports elements that start a new line in rendered text.
func breaksLine(a atom.Atom) bool {
	switch a {
	case atom.Br, atom.P, atom.Div, atom.Li, atom.Tr, atom.Td, atom.Th, atom.Table, atom.Ul, atom.Ol,
		atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6, atom.Section, atom.Article, atom.Main,
		atom.Header, atom.Footer, atom.Nav, atom.Aside, atom.Blockquote, atom.Pre, atom.Hr, atom.Dl,
		atom.Dt, atom.Dd, atom.Figure, atom.Figcaption, atom.Address, atom.Details, atom.Summary,
		atom.Caption, atom.Form, atom.Fieldset, atom.Body, atom.Html:
		return true
	}
	return false
}

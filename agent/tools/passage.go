package tools

import (
	"bytes"
	"strconv"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Kinds of passage units. Passages keep the document's structure as light Markdown — "## "
// headings, "- " list items and "| … |" table rows under their header — so that a reader of a
// passage (an LLM, or the extractive model) can tell a table row from prose and pair each cell
// with its column.
const (
	unitText = iota
	unitHeading
	unitItem
	unitTableHeader
	unitTableRow
)

// block is one structural line of a document before it is analysed into a unit.
type block struct {
	kind int
	text string
}

// docBlocks renders the sanitised HTML body of a document into blocks: headings, paragraph lines,
// list items and table rows (a table's first row, when it holds <th> cells, becomes its header).
func docBlocks(body []byte) []block {
	nodes, err := html.ParseFragment(bytes.NewReader(body), &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body})
	if err != nil {
		return nil
	}
	w := &blockWriter{}
	for _, n := range nodes {
		w.walk(n)
	}
	w.flush()
	return w.out
}

type blockWriter struct {
	out    []block
	inline strings.Builder // loose inline text between blocks
}

func (w *blockWriter) flush() {
	w.addLines(unitText, w.inline.String())
	w.inline.Reset()
}

// addLines adds each non-empty line of s as a block of kind.
func (w *blockWriter) addLines(kind int, s string) {
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(spaceRun.ReplaceAllString(line, " "))
		if line != "" {
			w.out = append(w.out, block{kind: kind, text: line})
		}
	}
}

func (w *blockWriter) walk(n *html.Node) {
	if n.Type == html.TextNode {
		w.inline.WriteString(strings.ReplaceAll(n.Data, "\n", " "))
		return
	}
	if n.Type != html.ElementNode {
		return
	}
	switch n.DataAtom {
	case atom.Script, atom.Style, atom.Template:
		return
	case atom.Br:
		w.inline.WriteString("\n")
		return
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		w.flush()
		level := int(n.Data[1] - '0')
		// The document title is shown apart; headings inside the body start at "##".
		if t := oneLine(inlineText(n, false)); t != "" {
			w.out = append(w.out, block{kind: unitHeading, text: strings.Repeat("#", max(2, level)) + " " + t})
		}
		return
	case atom.Ul, atom.Ol:
		w.flush()
		num := 0
		if n.DataAtom == atom.Ol {
			num = 1
			if s, err := strconv.Atoi(attr(n, "start")); err == nil {
				num = s
			}
		}
		for li := n.FirstChild; li != nil; li = li.NextSibling {
			if li.Type != html.ElementNode || li.DataAtom != atom.Li {
				continue
			}
			bullet := "- "
			if num > 0 {
				bullet = strconv.Itoa(num) + ". "
				num++
			}
			if t := oneLine(inlineText(li, true)); t != "" {
				w.out = append(w.out, block{kind: unitItem, text: bullet + t})
			}
			// Nested lists follow their item.
			for c := li.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && (c.DataAtom == atom.Ul || c.DataAtom == atom.Ol) {
					w.walk(c)
				}
			}
		}
		return
	case atom.Table:
		w.flush()
		w.table(n)
		return
	case atom.Pre:
		w.flush()
		w.addLines(unitText, nodeTextRaw(n))
		return
	case atom.P, atom.Dt, atom.Dd, atom.Figcaption, atom.Caption:
		w.flush()
		w.addLines(unitText, inlineText(n, false))
		return
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c)
	}
	if isBlockElement(n.DataAtom) {
		w.flush()
	}
}

func (w *blockWriter) table(n *html.Node) {
	var rows []*html.Node
	var collect func(*html.Node)
	collect = func(n *html.Node) {
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type != html.ElementNode {
				continue
			}
			switch c.DataAtom {
			case atom.Tr:
				rows = append(rows, c)
			case atom.Thead, atom.Tbody, atom.Tfoot:
				collect(c)
			}
		}
	}
	collect(n)
	for i, tr := range rows {
		var cells []string
		header := true
		for c := tr.FirstChild; c != nil; c = c.NextSibling {
			if c.Type != html.ElementNode || (c.DataAtom != atom.Td && c.DataAtom != atom.Th) {
				continue
			}
			if c.DataAtom == atom.Td {
				header = false
			}
			cells = append(cells, strings.ReplaceAll(oneLine(inlineText(c, false)), "|", `\|`))
		}
		if len(cells) == 0 {
			continue
		}
		row := "| " + strings.Join(cells, " | ") + " |"
		if i == 0 && header {
			w.out = append(w.out, block{kind: unitTableHeader, text: row + "\n|" + strings.Repeat(" --- |", len(cells))})
			continue
		}
		w.out = append(w.out, block{kind: unitTableRow, text: row})
	}
}

func isBlockElement(a atom.Atom) bool {
	switch a {
	case atom.Div, atom.Section, atom.Article, atom.Main, atom.Blockquote, atom.Header, atom.Footer,
		atom.Aside, atom.Nav, atom.Dl, atom.Details, atom.Summary, atom.Figure, atom.Hr, atom.Address:
		return true
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// inlineText is the text under n with <br> as line breaks; skipLists leaves out nested lists
// (a list item's sub-items are blocks of their own).
func inlineText(n *html.Node, skipLists bool) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		switch {
		case n.Type == html.TextNode:
			// Source line breaks inside a paragraph are soft; only <br> breaks a line.
			b.WriteString(strings.ReplaceAll(n.Data, "\n", " "))
			return
		case n.Type != html.ElementNode:
			return
		case n.DataAtom == atom.Br:
			b.WriteString("\n")
			return
		case n.DataAtom == atom.Script || n.DataAtom == atom.Style:
			return
		case skipLists && (n.DataAtom == atom.Ul || n.DataAtom == atom.Ol):
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
		if n.DataAtom == atom.P {
			b.WriteString(" ")
		}
	}
	walk(n)
	return b.String()
}

// oneLine collapses all whitespace, line breaks included, to single spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// nodeTextRaw is the text under n with its line breaks, for preformatted text.
func nodeTextRaw(n *html.Node) string {
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
	return b.String()
}

package markdown

import (
	"html"
	"strings"

	"github.com/citegate/citegate/citations"
)

// Inputs goldmark handles in more than linear time beyond these bounds are rendered by renderPlain
// instead (issue 7 point 9: no stored answer may cost a page view more than a few milliseconds).
const (
	// maxBrackets bounds the '[' that are not markers: goldmark's link parsing of many open
	// brackets or unclosed "[a](" is quadratic (2048 "[a](" cost ~20 ms, 64 KiB of them ~1 s).
	maxBrackets = 800
	// maxNesting bounds container nesting (blockquote markers and list items opened on one line):
	// 64 KiB of "> " or "1. " cost goldmark close to a second.
	maxNesting = 32
)

// needsPlain reports whether content exceeds maxBrackets or maxNesting.
func needsPlain(content string) bool {
	brackets := 0
	for i := 0; i < len(content); i++ {
		if content[i] == '[' {
			if i+1 < len(content) && content[i+1] == '^' {
				continue // a marker (or what looks like one) is parsed in constant time
			}
			if brackets++; brackets > maxBrackets {
				return true
			}
		}
	}
	for line := range strings.SplitSeq(content, "\n") {
		if containerDepth(line) > maxNesting {
			return true
		}
	}
	return false
}

// containerDepth counts the blockquote and list markers a line opens before its text.
func containerDepth(line string) int {
	depth := 0
	for i := 0; i < len(line); {
		switch c := line[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '>':
			depth++
			i++
		case c == '-' || c == '*' || c == '+':
			if i+1 < len(line) && line[i+1] != ' ' && line[i+1] != '\t' {
				return depth
			}
			depth++
			i++
		case '0' <= c && c <= '9':
			j := i
			for j < len(line) && '0' <= line[j] && line[j] <= '9' {
				j++
			}
			if j == len(line) || line[j] != '.' && line[j] != ')' {
				return depth
			}
			depth++
			i = j + 1
		default:
			return depth
		}
	}
	return depth
}

// renderPlain renders content as text: paragraphs at blank lines, line breaks kept, markers as
// superscripts (those outside code that point at a citation), bare URLs through the link rule. It
// is linear in the input and is used only for inputs goldmark would be slow on.
func renderPlain(content string, st *renderState) string {
	markers := citations.MarkersOutsideCode(content)
	present := map[int]bool{}
	for _, m := range markers {
		present[m.N] = true
	}
	for _, c := range st.valid {
		if present[c.N] {
			st.cited = append(st.cited, c)
		}
	}
	display := citations.DisplayNumbers(st.cited)
	occurrences := map[int]int{}
	var b strings.Builder
	b.Grow(len(content) + len(content)/4)
	text := func(s string) {
		s = citations.Strip(s) // markers in code stay out of the plain text too
		s, n := citations.FilterBareURLs(s, st.allow)
		st.hidden += n
		s = html.EscapeString(strings.ReplaceAll(s, "\r\n", "\n"))
		s = strings.ReplaceAll(s, "\n\n", "</p>\n<p>")
		b.WriteString(strings.ReplaceAll(s, "\n", "<br>\n"))
	}
	b.WriteString("<p>")
	last := 0
	for _, m := range markers {
		text(content[last:m.Start])
		last = m.End
		k := display[m.N]
		if k == 0 {
			continue
		}
		occurrences[k]++
		b.WriteString(supHTML(st.anchor, k, occurrences[k], m.N))
	}
	text(content[last:])
	b.WriteString("</p>\n")
	return b.String()
}

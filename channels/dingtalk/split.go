package dingtalk

import (
	"strings"
	"unicode/utf8"
)

// DingTalk documents about 5000 characters for a markdown message and 15000 bytes for an OpenAPI
// msgParam (JSON-escaped title and text together). Parts stay well under both so the "part i/n" note
// and JSON escaping fit.
const (
	markdownMaxRunes = 4500
	markdownMaxBytes = 10000
	// cardMaxRunes bounds the text of one AI card; a longer answer continues in markdown messages.
	cardMaxRunes = 8000
	cardMaxBytes = 24000
)

// prefixLimit returns the byte length of the longest prefix of s within maxRunes and maxBytes, cut
// on a rune boundary.
func prefixLimit(s string, maxRunes, maxBytes int) int {
	n, runes := 0, 0
	for n < len(s) && runes < maxRunes {
		_, size := utf8.DecodeRuneInString(s[n:])
		if n+size > maxBytes {
			break
		}
		n += size
		runes++
	}
	return n
}

// cutPoint returns where to end the next part of s: the whole of s when it fits, else after the last
// paragraph break, line break or space in the second half of the allowed prefix, else the limit.
func cutPoint(s string, maxRunes, maxBytes int) int {
	lim := prefixLimit(s, maxRunes, maxBytes)
	if lim >= len(s) {
		return len(s)
	}
	if lim == 0 {
		// maxBytes smaller than one rune: take one rune anyway so splitting always progresses.
		_, size := utf8.DecodeRuneInString(s)
		return size
	}
	head := s[:lim]
	for _, sep := range []string{"\n\n", "\n", "。", ". ", " "} {
		if i := strings.LastIndex(head, sep); i >= lim/2 {
			return i + len(sep)
		}
	}
	return lim
}

// splitMarkdown splits text into parts within the limits, preferring paragraph and line breaks.
// The parts concatenate to text exactly, so nothing is lost.
func splitMarkdown(text string, maxRunes, maxBytes int) []string {
	if text == "" {
		return []string{""}
	}
	var parts []string
	for text != "" {
		n := cutPoint(text, maxRunes, maxBytes)
		parts = append(parts, text[:n])
		text = text[n:]
	}
	return parts
}

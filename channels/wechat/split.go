package wechat

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of one answer in WeChat. The text limit of a customer-service message is not documented
// (a community report says about 2048 bytes), so parts stay at 2000 bytes including their note.
// WeChat allows only a few customer-service messages per user message (5 within 48 hours), so an
// answer uses at most maxParts of them.
const (
	maxPartBytes = 2000
	maxParts     = 5
)

// truncatedNote ends the last part of an answer that did not fit into maxParts messages.
const truncatedNote = "(内容过长，已截断)"

// splitText cuts text into at most maxParts messages of at most maxBytes bytes each. Several parts
// carry a "(i/n)" note; when even maxParts parts cannot hold the text, the last one ends with
// truncatedNote. Cuts fall on line breaks where one is near, else on rune boundaries.
func splitText(text string, maxBytes, maxParts int) []string {
	if len(text) <= maxBytes {
		return []string{text}
	}
	label := func(i, n int) string { return fmt.Sprintf("\n(%d/%d)", i, n) }
	// The longest label for maxParts parts; a two-digit count only widens it by a byte or two.
	budget := maxBytes - len(label(maxParts, maxParts))
	chunks := chunk(text, budget, maxParts+1)
	if len(chunks) <= maxParts {
		out := make([]string, len(chunks))
		for i, c := range chunks {
			out[i] = strings.TrimRight(c, "\n") + label(i+1, len(chunks))
		}
		return out
	}
	// Too long: fill maxParts-1 parts, then a last one that leaves room for the note.
	out := make([]string, 0, maxParts)
	rest := text
	for i := 1; i <= maxParts && rest != ""; i++ {
		b := budget
		if i == maxParts {
			b -= len("\n" + truncatedNote)
		}
		c := chunk(rest, b, 1)[0]
		rest = rest[len(c):]
		part := strings.TrimRight(c, "\n") + label(i, maxParts)
		if i == maxParts {
			part += "\n" + truncatedNote
		}
		out = append(out, part)
	}
	return out
}

// chunk cuts text into pieces of at most budget bytes, stopping after limit pieces (the last piece
// then holds only what fitted). Concatenating all pieces of an uncut text gives the text back.
func chunk(text string, budget, limit int) []string {
	var out []string
	for text != "" && len(out) < limit {
		if len(text) <= budget {
			out = append(out, text)
			break
		}
		cut := cutPoint(text, budget)
		out = append(out, text[:cut])
		text = text[cut:]
	}
	return out
}

// cutPoint returns where to end a piece of at most budget bytes: after the last line break in the
// second half of the window, else after the last sentence end or space there, else at the last rune
// boundary.
func cutPoint(text string, budget int) int {
	cut := budget
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	if cut == 0 {
		// A budget smaller than one rune: take the rune anyway rather than loop forever.
		_, size := utf8.DecodeRuneInString(text)
		return size
	}
	window := text[:cut]
	half := cut / 2
	if i := strings.LastIndex(window, "\n"); i >= half {
		return i + 1
	}
	best := -1
	for _, sep := range []string{"。", "！", "？", "；", ". ", "! ", "? ", " "} {
		if i := strings.LastIndex(window, sep); i >= half && i+len(sep) > best {
			best = i + len(sep)
		}
	}
	if best > 0 {
		return best
	}
	return cut
}

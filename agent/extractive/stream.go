package extractive

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/citegate/citegate/agent/llm"
	"github.com/citegate/citegate/citations"
)

// Streaming pieces. A real model streams tokens; the offline model has no reason to be that fine,
// yet its deltas must still exercise what a model's stream does to the gateway: text that arrives
// in pieces, and markers cut in two. It therefore streams phrases — a piece ends at white space or
// punctuation once it holds minChunkRunes runes, and never holds more than maxChunkRunes — and
// every marker "[^n^]" arrives as "[^n" and "^]" in two deltas, as a tokenizer splits it.
const (
	minChunkRunes = 6
	maxChunkRunes = 24
)

// streamText hands text to onDelta in phrases (see chunks).
func streamText(ctx context.Context, text string, onDelta func(string)) (llm.Response, error) {
	sent := 0
	for chunk := range chunks(text) {
		if err := ctx.Err(); err != nil {
			return llm.Response{Text: text[:sent]}, fmt.Errorf("extractive: %w", err)
		}
		sent += len(chunk)
		onDelta(chunk)
	}
	return llm.Response{Text: text}, nil
}

// chunks yields text as consecutive pieces, each a substring of text; their concatenation is text.
func chunks(text string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		start, runes := 0, 0
		for i := 0; i < len(text); {
			if text[i] == '[' && i+1 < len(text) && text[i+1] == '^' {
				if end, ok := markerEnd(text, i); ok {
					// The text before the marker, then the marker in two.
					if i > start && !yield(text[start:i]) {
						return
					}
					if !yield(text[i:end-2]) || !yield(text[end-2:end]) {
						return
					}
					start, runes, i = end, 0, end
					continue
				}
			}
			r, size := utf8.DecodeRuneInString(text[i:])
			i += size
			runes++
			if runes >= maxChunkRunes || runes >= minChunkRunes && endsPhrase(r) {
				if !yield(text[start:i]) {
					return
				}
				start, runes = i, 0
			}
		}
		if start < len(text) {
			yield(text[start:])
		}
	}
}

// endsPhrase reports a rune after which a phrase may end: white space or punctuation.
func endsPhrase(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsPunct(r)
}

// markerEnd reports whether a marker "[^digits^]" starts at text[i] and where it ends.
func markerEnd(text string, i int) (int, bool) {
	j := i + 2
	for j < len(text) && j-i-2 < citations.MaxDigits && '0' <= text[j] && text[j] <= '9' {
		j++
	}
	if j == i+2 || !strings.HasPrefix(text[j:], "^]") {
		return 0, false
	}
	return j + 2, true
}

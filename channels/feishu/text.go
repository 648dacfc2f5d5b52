package feishu

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Size budgets. Feishu measures the request body: text messages ≤150 KB, cards ≤30 KB, and a card
// element's content ≤100,000 characters. The budgets leave room for the JSON around the text.
const (
	textBudget = 140 * 1024 // bytes of one text message's text, escaped twice (content JSON in body JSON)
	cardBudget = 26 * 1024  // JSON-escaped bytes of the card's markdown element
)

// Visible notes for text that does not fit in one message or card.
const (
	cardTruncatedNote = "\n\n……（内容过长，卡片只显示前一部分，完整内容见下方消息 / truncated, the full text follows）"
	partNoteFormat    = "（第 %d/%d 部分 / part %d of %d）\n"
)

// escapedLen is the length of r inside a JSON string as encoding/json writes it (the SDK's
// serializer escapes <, > and & too). When double is set, the JSON string is itself embedded in
// another JSON string, as a message's content is inside the request body, so every escape's
// backslash is escaped again.
func escapedLen(r rune, double bool) int {
	switch {
	case r == '"' || r == '\\':
		if double {
			return 4 // \\\" or \\\\
		}
		return 2
	case r == '\n' || r == '\r' || r == '\t':
		if double {
			return 3 // \\n
		}
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029 || r == utf8.RuneError:
		if double {
			return 7 // \\u003c
		}
		return 6 // \u003c; invalid bytes become \ufffd
	default:
		return utf8.RuneLen(r)
	}
}

// jsonLen is the size of s as the content of a card element (one level of JSON).
func jsonLen(s string) int { return costLen(s, false) }

func costLen(s string, double bool) int {
	n := 0
	for _, r := range s {
		n += escapedLen(r, double)
	}
	return n
}

// cutAt returns the length of the largest prefix of s whose JSON-escaped size is ≤ budget,
// preferring to end after a newline (or a space) when one is in the last quarter of the prefix.
func cutAt(s string, budget int, double bool) int {
	end := cutExact(s, budget, double)
	if end >= len(s) {
		return len(s)
	}
	floor := end * 3 / 4
	if i := strings.LastIndexByte(s[:end], '\n'); i >= floor && i > 0 {
		return i + 1
	}
	if i := strings.LastIndexByte(s[:end], ' '); i >= floor && i > 0 {
		return i + 1
	}
	if end == 0 { // budget smaller than one rune: take the rune anyway, so splitting always progresses
		_, size := utf8.DecodeRuneInString(s)
		return size
	}
	return end
}

// cutExact returns the length of the largest prefix of s whose JSON-escaped size is ≤ budget.
func cutExact(s string, budget int, double bool) int {
	n, end := 0, 0
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		n += escapedLen(r, double)
		if n > budget {
			break
		}
		end += size
	}
	return end
}

// splitText splits s into text messages that each fit the text budget; with more than one part,
// each part starts with a visible "part i of n" note.
func splitText(s string) []string {
	if costLen(s, true) <= textBudget {
		return []string{s}
	}
	noteRoom := costLen(fmt.Sprintf(partNoteFormat, 999, 999, 999, 999), true)
	var parts []string
	for s != "" {
		k := cutAt(s, textBudget-noteRoom, true)
		parts = append(parts, s[:k])
		s = s[k:]
	}
	for i := range parts {
		parts[i] = fmt.Sprintf(partNoteFormat, i+1, len(parts), i+1, len(parts)) + parts[i]
	}
	return parts
}

// fitCard returns what fits into the card (with a visible note when cut) and the rest, which the
// caller sends as text messages so nothing is lost.
func fitCard(s string) (card, rest string) {
	if jsonLen(s) <= cardBudget {
		return s, ""
	}
	k := cutAt(s, cardBudget-jsonLen(cardTruncatedNote), false)
	return s[:k] + cardTruncatedNote, s[k:]
}

// streamingView is what a card shows while streaming: the longest prefix of the text that fits.
// As the text grows each view extends the previous one, which keeps the typewriter effect; Finish
// replaces it with the final text (and a note when it had to be cut).
func streamingView(s string) string {
	return s[:cutExact(s, cardBudget, false)]
}

package citations

import (
	"strings"
	"unicode/utf8"
)

// Bounds of a citation's lead (Citation.Lead): what a source card shows of the excerpt without
// asking the server for the whole text.
const (
	MaxLeadLines = 3
	MaxLeadRunes = 200
)

// Lead returns the first lines of an excerpt as plain text for a source card: at most
// MaxLeadLines non-empty lines and MaxLeadRunes runes ("…" marks a cut), markdown decoration
// removed (heading marks, list bullets, quote marks, table pipes; table separator rows and fence
// lines skipped), markers stripped, whitespace collapsed, lines joined by "\n". It is idempotent,
// so a renderer can apply it again to a stored lead whose origin it cannot know.
func Lead(excerpt string) string {
	excerpt = Strip(strings.ToValidUTF8(excerpt, "\uFFFD"))
	var lines []string
	cut := false
	for line := range strings.SplitSeq(excerpt, "\n") {
		if line = leadLine(line); line == "" {
			continue
		}
		if len(lines) == MaxLeadLines {
			cut = true
			break
		}
		lines = append(lines, line)
	}
	out := strings.Join(lines, "\n")
	if !cut && utf8.RuneCountInString(out) <= MaxLeadRunes {
		return out
	}
	// Cut: keep MaxLeadRunes-1 runes and the ellipsis, so a second pass changes nothing.
	if r := []rune(out); len(r) > MaxLeadRunes-1 {
		out = string(r[:MaxLeadRunes-1])
	}
	out = strings.TrimRight(out, " \n")
	if strings.HasSuffix(out, "…") {
		return out
	}
	return out + "…"
}

// leadLine is one excerpt line without its markdown decoration; "" when nothing readable is left.
// Decoration is removed until nothing more comes off (a table cell may itself start with "# "), which
// is what makes Lead idempotent.
func leadLine(line string) string {
	for {
		next := undecorate(line)
		if next == line {
			return line
		}
		line = next
	}
}

// undecorate takes one layer of decoration off a line.
func undecorate(line string) string {
	line = strings.Join(strings.Fields(line), " ")
	if strings.HasPrefix(line, "```") || strings.HasPrefix(line, "~~~") {
		return ""
	}
	for {
		trimmed := line
		for _, p := range []string{"> ", "- ", "* ", "+ "} {
			trimmed = strings.TrimPrefix(trimmed, p)
		}
		if h := strings.TrimLeft(trimmed, "#"); h != trimmed && (h == "" || h[0] == ' ') {
			trimmed = strings.TrimSpace(h)
		}
		if trimmed == line {
			break
		}
		line = trimmed
	}
	if strings.HasPrefix(line, "|") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		var kept []string
		separator := true
		for _, c := range cells {
			c = strings.TrimSpace(c)
			if strings.Trim(c, ":-") != "" {
				separator = false
			}
			if c != "" {
				kept = append(kept, c)
			}
		}
		if separator {
			return ""
		}
		line = strings.Join(kept, " · ")
	}
	return line
}

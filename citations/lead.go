package citations

import (
	"math/bits"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of a citation's lead (Citation.Lead): what a source card shows of the excerpt without
// asking the server for the whole text.
const (
	MaxLeadLines = 3
	MaxLeadRunes = 200
)

// leadWindowRunes is how many runes of a long excerpt line Lead looks at first. A lead shows at most
// MaxLeadRunes runes, so a window that still yields more than that after its decoration and markers
// are removed decides the lead without reading the rest of the line (see leadOfLine); the margin
// covers the usual decoration.
const leadWindowRunes = MaxLeadRunes + 32

// Lead returns the first lines of an excerpt as plain text for a source card: at most
// MaxLeadLines non-empty lines and MaxLeadRunes runes ("…" marks a cut), markdown decoration
// removed (heading marks, list bullets, quote marks, table pipes; table separator rows and fence
// lines skipped), markers stripped, whitespace collapsed, lines joined by "\n". It is idempotent,
// so a renderer can apply it again to a stored lead whose origin it cannot know.
//
// Its cost is bounded by the lead, not by the excerpt: Verify computes one per cited source, and
// excerpts run to kilobytes. Invalid UTF-8 repair and marker stripping cannot cross a newline (a
// newline is valid UTF-8 and no marker holds one), so both are applied line by line, and reading
// stops once the lead is known to be cut. FuzzLeadReference checks it against the whole-text
// definition kept in the tests.
func Lead(excerpt string) string { return lead(excerpt, false) }

// lead is Lead; valid says the excerpt is known to be valid UTF-8 (a registry source's excerpt is:
// it was decoded from JSON), which spares the repair its validation pass.
func lead(excerpt string, valid bool) string {
	var lines [MaxLeadLines]string
	var keepOff, keepRunes [MaxLeadLines]int // what of each line a cut keeps
	n, runes := 0, 0                         // lines kept; runes of their join
	cut := false
	for rest := excerpt; ; {
		line := rest
		i := strings.IndexByte(rest, '\n')
		if i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		}
		if line = leadOfLine(line, valid); line != "" {
			if n == MaxLeadLines {
				cut = true
				break
			}
			if n > 0 {
				runes++ // the joining newline
			}
			lines[n] = line
			// One walk over the line tells where a cut would end it and whether the lead is cut;
			// it stops past MaxLeadRunes, which is all that is kept.
			keep := max(MaxLeadRunes-1-runes, 0)
			off, count := runePrefix(line, keep, MaxLeadRunes-runes)
			keepOff[n], keepRunes[n] = off, min(count, keep)
			n++
			if runes += count; runes > MaxLeadRunes {
				cut = true
				break
			}
		}
		if i < 0 {
			break
		}
	}
	if !cut {
		if n == 1 {
			return lines[0] // no copy: often a part of the excerpt itself
		}
		return strings.Join(lines[:n], "\n")
	}
	// Cut: keep MaxLeadRunes-1 runes and the ellipsis, so a second pass changes nothing.
	var b strings.Builder
	b.Grow(4*MaxLeadRunes + len("…"))
	left := MaxLeadRunes - 1
	for k := range n {
		if k > 0 {
			if left == 0 {
				break
			}
			b.WriteByte('\n')
			left--
		}
		b.WriteString(lines[k][:keepOff[k]])
		if left -= keepRunes[k]; left == 0 {
			break
		}
	}
	whole := b.String()
	out := strings.TrimRight(whole, " \n")
	switch {
	case strings.HasSuffix(out, "…"):
		return out
	case len(out) == len(whole):
		b.WriteString("…") // into the room grown above: no second copy
		return b.String()
	}
	return out + "…"
}

// runePrefix walks s, which is valid UTF-8, up to limit+1 runes (keep ≤ limit): off is the byte
// offset after its first keep runes (len(s) when it has fewer), count is min(its rune count,
// limit+1). In valid UTF-8 a rune starts at every byte that is not a continuation byte, so nothing
// is decoded.
func runePrefix(s string, keep, limit int) (off, count int) {
	off = -1
	i := 0
	// Whole words of eight bytes first, while every rune starting in them comes before both the
	// keep-th rune and the end of the walk; then i moves on to the next rune start (the rune that
	// began in the word is counted already) and the byte walk finishes.
	bound := limit + 1
	if keep == 0 {
		off = 0
	} else {
		bound = min(keep, bound)
	}
	for i+8 <= len(s) {
		n := runeStarts8(s, i)
		if count+n > bound {
			break
		}
		count += n
		i += 8
	}
	if i > 0 {
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
	}
	for i < len(s) && count <= limit {
		if count == keep {
			off = i
		}
		i++
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		count++
	}
	if off < 0 {
		off = i // s has no more than keep runes (or keep == count at the end)
	}
	return off, count
}

// plainText8 reports whether none of the bytes of s[i:i+8] is below 0x21 (space, tab, newline and
// the other controls) or 0xc2, 0xe1, 0xe2 or 0xe3 (the first bytes of every non-ASCII white space
// rune), with the word tests of plain8; a false "no" only sends the word to the byte loop.
func plainText8(s string, i int) bool {
	w := s[i : i+8] // one bounds check, and the eight loads below become one
	x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	low := (x - ones*0x21) & ^x & highs
	c2 := x ^ (ones * 0xc2) // 0xc2 bytes become zero
	e0 := x ^ (ones * 0xe0) // 0xe0…0xe3 bytes become 0…3 (0xe0 needlessly: it then takes the byte loop)
	return low|(c2-ones)&^c2&highs|(e0-ones*4)&^e0&highs == 0
}

// runeStarts8 counts the bytes of s[i:i+8] that start a rune (every byte but a 10xxxxxx continuation
// byte): x &^ (x << 1) has the high bit of exactly the continuation bytes set (the bit shifted in from
// the byte below lands in bit 0 and is masked off).
func runeStarts8(s string, i int) int {
	w := s[i : i+8] // one bounds check, and the eight loads below become one
	x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
	return 8 - bits.OnesCount64(x&^(x<<1)&0x8080808080808080)
}

// runeCountUpTo is min(utf8.RuneCountInString(s), limit+1) for limit ≥ 0 and valid UTF-8 s: enough
// to tell whether s has more than limit runes without counting all of them.
func runeCountUpTo(s string, limit int) int {
	_, n := runePrefix(s, 0, max(limit, 0))
	return n
}

// runeOffset is the byte offset of the n-th rune of s (len(s) when s has fewer).
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// leadOfLine is leadLine(Strip(repair(raw))) for one raw excerpt line (repair: invalid UTF-8 bytes
// replaced by U+FFFD), reading only leadWindowRunes runes of a long line when that decides the lead.
//
// Why a window is enough: cut before a rune start, the window's repair is a prefix of the line's;
// the Stripper's output for it is a prefix of Strip of the whole (its streaming invariant); and every
// step of leadLine outside a table row looks only at the start of the line (collapsing white space,
// taking off "> ", "- ", "#"… and fence marks), so for a prefix p whose result keeps more than
// MaxLeadRunes+1 runes, leadLine(p) is a prefix of the line's result that already holds every rune
// Lead keeps. A table row ("|" first) depends on its end (cells, trailing pipes, separator rows):
// it, and a window whose result is short, take the whole line.
func leadOfLine(raw string, valid bool) string {
	repair := repairUTF8
	if valid {
		repair = func(s string) string { return s }
	}
	if cut := windowEnd(raw); cut < len(raw) {
		var st Stripper
		p := st.Push(repair(raw[:cut]))
		if got, table := leadLineTable(p); !table && runeCountUpTo(got, MaxLeadRunes+1) > MaxLeadRunes+1 {
			return got
		}
	}
	return leadLine(Strip(repair(raw)))
}

// windowEnd is the offset in s of the byte that starts its (leadWindowRunes+1)-th rune, counting
// every byte that is not a UTF-8 continuation byte as a rune start (len(s) when s is shorter). A
// window cut there never splits a valid rune, so its repair is a prefix of the line's.
func windowEnd(s string) int {
	if len(s) <= leadWindowRunes {
		return len(s)
	}
	n, i := 0, 0
	// Eight bytes at a time while the window's end is not among them.
	for ; i+8 <= len(s); i += 8 {
		starts := runeStarts8(s, i)
		if n+starts > leadWindowRunes {
			break
		}
		n += starts
	}
	for ; i < len(s); i++ {
		if utf8.RuneStart(s[i]) {
			if n == leadWindowRunes {
				return i
			}
			n++
		}
	}
	return len(s)
}

func repairUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// leadLine is one excerpt line without its markdown decoration; "" when nothing readable is left.
// Decoration is removed until nothing more comes off (a table cell may itself start with "# "), which
// is what makes Lead idempotent.
func leadLine(line string) string {
	out, _ := leadLineTable(line)
	return out
}

// leadLineTable is leadLine, also reporting whether some pass read the line as a table row.
func leadLineTable(line string) (string, bool) {
	table := false
	for {
		next, t := undecorate(line)
		table = table || t
		if next == line {
			return line, table
		}
		line = next
	}
}

// undecorate takes one layer of decoration off a line; table reports that it was read as a table
// row.
func undecorate(line string) (out string, table bool) {
	line = collapseSpace(line)
	if strings.HasPrefix(line, "```") || strings.HasPrefix(line, "~~~") {
		return "", false
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
			return "", true
		}
		line = strings.Join(kept, " · ")
		return line, true
	}
	return line, false
}

// collapseSpace is strings.Join(strings.Fields(s), " "), without allocating when s is already
// collapsed (no leading, trailing or repeated white space, and no white space other than ' ').
func collapseSpace(s string) string {
	prevSpace := true // a leading space is not collapsed
	for i := 0; i < len(s); i++ {
		// Eight bytes at a time while none of them is ASCII white space or a control byte, nor a
		// byte that starts a non-ASCII white space rune: such bytes are all "not a space" alone.
		for i+8 <= len(s) && plainText8(s, i) {
			i += 8
			prevSpace = false
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c >= utf8.RuneSelf {
			// Every non-ASCII white space rune (U+0085, U+00A0, U+1680, U+2000…U+205F, U+3000)
			// starts with one of these bytes; any other byte, continuation bytes included, is
			// part of a rune that is not white space (or of an invalid one, which Fields reads
			// as U+FFFD, one byte at a time).
			if c == 0xc2 || c == 0xe1 || c == 0xe2 || c == 0xe3 {
				r, size := utf8.DecodeRuneInString(s[i:])
				if unicode.IsSpace(r) {
					return strings.Join(strings.Fields(s), " ")
				}
				i += size - 1
			}
			prevSpace = false
			continue
		}
		switch c {
		case ' ':
			if prevSpace {
				return strings.Join(strings.Fields(s), " ")
			}
			prevSpace = true
		case '\t', '\n', '\v', '\f', '\r':
			return strings.Join(strings.Fields(s), " ")
		default:
			prevSpace = false
		}
	}
	if prevSpace && len(s) > 0 {
		return strings.Join(strings.Fields(s), " ")
	}
	return s
}

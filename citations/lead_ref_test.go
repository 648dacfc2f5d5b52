package citations

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// leadReference is Lead as it was first written: the whole excerpt repaired, stripped, split and
// undecorated line by line. Lead now stops reading once the lead is decided; FuzzLeadReference
// checks that nothing else changed.
func leadReference(excerpt string) string {
	excerpt = Strip(strings.ToValidUTF8(excerpt, "\uFFFD"))
	var lines []string
	cut := false
	for line := range strings.SplitSeq(excerpt, "\n") {
		if line = leadLineReference(line); line == "" {
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
	if r := []rune(out); len(r) > MaxLeadRunes-1 {
		out = string(r[:MaxLeadRunes-1])
	}
	out = strings.TrimRight(out, " \n")
	if strings.HasSuffix(out, "…") {
		return out
	}
	return out + "…"
}

func leadLineReference(line string) string {
	for {
		next := undecorateReference(line)
		if next == line {
			return line
		}
		line = next
	}
}

func undecorateReference(line string) string {
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

// leadCases are inputs where stopping early could go wrong: long lines (past leadWindowRunes) whose
// decoration, white space, table pipes, markers or invalid bytes sit at either end of the window.
func leadCases() []string {
	long := strings.Repeat("长", 400)
	spaces := strings.Repeat(" ", 2000)
	return []string{
		"", "a\nb\nc\nd", long, "# " + long, "> - # " + long, "| " + long + " | b |",
		"| " + strings.Repeat("-", 2000) + " |", "| " + strings.Repeat("-", 2000) + " | x |",
		"a" + spaces + "b", spaces + "x", strings.Repeat("a ", 1200), strings.Repeat("  a", 600),
		strings.Repeat("#", 1500) + " x", strings.Repeat("#", 1500) + "x", strings.Repeat("> ", 600) + "x",
		strings.Repeat("[^1", 400) + strings.Repeat("^]", 400) + long, strings.Repeat("\xff", 1500) + "x",
		strings.Repeat("x\u3000", 600), strings.Repeat("ab", 510) + "\u00a0\u00a0" + long,
		"```" + long, "x\n\n\n" + long + "\n" + long, long[:600] + "\n" + long,
		strings.Repeat("长 ", 201) + "\n" + "next", strings.Repeat("é", 199) + "\n…",
		strings.Repeat("x", 199) + "  \n" + "y", strings.Repeat("x", 199) + "…\nmore",
		strings.Repeat("x", 200), strings.Repeat("x", 201), strings.Repeat("x", 198) + "\ny",
		strings.Repeat("长", leadWindowRunes-1) + "[^12" + "^]" + long, strings.Repeat("长", leadWindowRunes) + "\xe4\xb8" + long,
		strings.Repeat("a", leadWindowRunes-1) + "\u3000\u3000b", "\u0085x\u00a0 y\u2028", "\xe2\x80 \xe3\x80\x80x",
		strings.Repeat("[^1", 300) + long,
	}
}

func TestLeadReference(t *testing.T) {
	for i, s := range leadCases() {
		if got, want := Lead(s), leadReference(s); got != want {
			t.Errorf("case %d (%q…):\n got %q\nwant %q", i, s[:min(len(s), 40)], got, want)
		}
	}
}

// FuzzLeadReference: Lead equals the whole-text definition for any excerpt, the long lines of
// leadCases grown or cut by the fuzzer included.
func FuzzLeadReference(f *testing.F) {
	for _, s := range leadCases() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := collapseSpace(s), strings.Join(strings.Fields(s), " "); got != want {
			t.Fatalf("collapseSpace(%q) = %q, want %q", s, got, want)
		}
		if got, want := Lead(s), leadReference(s); got != want {
			t.Fatalf("Lead(%q):\n got %q\nwant %q", s, got, want)
		}
		// The same text behind a long line exercises the windowed path with the fuzzer's bytes
		// at the window's edge.
		pad := strings.Repeat("词", leadWindowRunes-len(s)%7)
		for _, v := range []string{pad + s, s + pad, "| " + pad + s, strings.Repeat("a", len(s)%8) + pad + s} {
			if got, want := Lead(v), leadReference(v); got != want {
				t.Fatalf("Lead(%q):\n got %q\nwant %q", v, got, want)
			}
			if got, want := windowEnd(v), windowEndReference(v); got != want {
				t.Fatalf("windowEnd(%q) = %d, want %d", v, got, want)
			}
			// A registry excerpt is valid UTF-8 (decoded from JSON): the lead that skips the
			// repair is the same.
			if valid := strings.ToValidUTF8(v, "\uFFFD"); lead(valid, true) != Lead(valid) {
				t.Fatalf("lead(%q, valid) = %q, want %q", valid, lead(valid, true), Lead(valid))
			}
		}
	})
}

// windowEndReference is windowEnd byte by byte, the oracle for its eight-bytes-at-a-time walk.
func windowEndReference(s string) int {
	if len(s) <= leadWindowRunes {
		return len(s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if utf8.RuneStart(s[i]) {
			if n == leadWindowRunes {
				return i
			}
			n++
		}
	}
	return len(s)
}

// runePrefixReference is runePrefix byte by byte, the oracle for its eight-bytes-at-a-time walk.
func runePrefixReference(s string, keep, limit int) (off, count int) {
	off = -1
	i := 0
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
		off = i
	}
	return off, count
}

// FuzzRunePrefix: runePrefix agrees with the byte walk for every valid text, keep and limit
// (keep ≤ limit, as its callers pass them).
func FuzzRunePrefix(f *testing.F) {
	f.Add("员工出差住宿标准按城市分类执行，超标部分自理。", 5, 9)
	f.Add("ascii only text that is long enough", 0, 12)
	f.Add("", 0, 0)
	f.Fuzz(func(t *testing.T, s string, keep, limit int) {
		s = strings.ToValidUTF8(s, "\uFFFD")
		limit = ((limit % 300) + 300) % 300
		keep = ((keep % (limit + 1)) + limit + 1) % (limit + 1)
		for _, v := range []string{s, s + s + s, strings.Repeat("词a", 40) + s} {
			gotOff, gotN := runePrefix(v, keep, limit)
			wantOff, wantN := runePrefixReference(v, keep, limit)
			if gotOff != wantOff || gotN != wantN {
				t.Fatalf("runePrefix(%q, %d, %d) = %d, %d; want %d, %d", v, keep, limit, gotOff, gotN, wantOff, wantN)
			}
		}
	})
}

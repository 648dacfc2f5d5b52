// Package citations holds citegate's citation rules: the [^n^] marker grammar, extraction and
// stripping (also for streamed text), the per-run source registry built from tool results, and the
// verification of an answer's markers against that registry. It uses the standard library only.
package citations

import "strings"

// MaxDigits bounds the digits of a marker number. Extract, Strip and Stripper share it, so a longer
// run of digits such as "[^1234567890^]" is ordinary text everywhere.
const MaxDigits = 9

// maxMarkerLen is the length of the longest marker: "[^" + MaxDigits digits + "^]".
const maxMarkerLen = 2 + MaxDigits + 2

// Marker is one [^n^] occurrence in a text: N is its number, [Start, End) its byte range.
type Marker struct {
	N          int
	Start, End int
}

// matchAt reports whether a complete marker starts at s[i] (which must be '['), returning its number
// and end offset.
func matchAt(s string, i int) (n, end int, ok bool) {
	if i+1 >= len(s) || s[i+1] != '^' {
		return 0, 0, false
	}
	j := i + 2
	for j < len(s) && j-(i+2) < MaxDigits && isDigit(s[j]) {
		n = n*10 + int(s[j]-'0')
		j++
	}
	if j == i+2 || j+1 >= len(s) || s[j] != '^' || s[j+1] != ']' {
		return 0, 0, false
	}
	return n, j + 2, true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// Markers returns every marker in text, in order of appearance, out-of-range numbers included.
func Markers(text string) []Marker {
	var out []Marker
	for i := 0; i < len(text); {
		k := strings.Index(text[i:], "[^")
		if k < 0 {
			break
		}
		i += k
		if n, end, ok := matchAt(text, i); ok {
			out = append(out, Marker{N: n, Start: i, End: end})
			i = end
			continue
		}
		i++
	}
	return out
}

// Extract returns the numbers of every marker in text, in order of appearance (duplicates and
// out-of-range numbers included; callers filter).
func Extract(text string) []int {
	ms := Markers(text)
	if len(ms) == 0 {
		return nil
	}
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.N
	}
	return out
}

// Strip removes every marker from text and leaves everything else byte for byte.
func Strip(text string) string {
	first := strings.Index(text, "[^")
	if first < 0 {
		return text
	}
	var b strings.Builder
	b.Grow(len(text))
	last := 0
	for i := first; i < len(text); {
		k := strings.Index(text[i:], "[^")
		if k < 0 {
			break
		}
		i += k
		if _, end, ok := matchAt(text, i); ok {
			b.WriteString(text[last:i])
			last, i = end, end
			continue
		}
		i++
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// couldBecomeMarker reports whether s (which starts with '[') is a proper prefix of some marker, so
// more input could still turn it into one.
func couldBecomeMarker(s string) bool {
	if len(s) >= maxMarkerLen || s[0] != '[' {
		return false
	}
	if len(s) == 1 {
		return true
	}
	if s[1] != '^' {
		return false
	}
	digits := 0
	for j := 2; j < len(s); j++ {
		switch {
		case isDigit(s[j]) && j == 2+digits:
			digits++
			if digits > MaxDigits {
				return false
			}
		case s[j] == '^' && j == 2+digits && digits > 0:
			// "[^12^" waits for its ']'.
			return j == len(s)-1
		default:
			return false
		}
	}
	return true
}

// Stripper removes markers from a text that arrives in chunks. For any split of a text,
// the concatenation of every Push result and Flush equals Strip(text). It holds back only a tail that
// could still become a marker (at most MaxDigits+3 bytes). The zero value is ready to use.
type Stripper struct {
	pending string
}

// Push takes the next chunk and returns the text that can be shown now.
func (s *Stripper) Push(chunk string) string {
	buf := chunk
	if s.pending != "" {
		buf = s.pending + chunk
		s.pending = ""
	}
	// A marker holds exactly one '[' (its first byte), so a held-back tail can only start at one of
	// the last few '[' of the buffer; everything before it strips independently of what follows.
	cut := len(buf)
	lo := max(len(buf)-maxMarkerLen+1, 0)
	for i := len(buf) - 1; i >= lo; i-- {
		if buf[i] == '[' {
			if couldBecomeMarker(buf[i:]) {
				cut = i
			}
			break
		}
	}
	s.pending = buf[cut:]
	return Strip(buf[:cut])
}

// Flush returns the held-back tail; it cannot become a marker any more because the text has ended.
func (s *Stripper) Flush() string {
	p := s.pending
	s.pending = ""
	return p
}

// Pending reports how many bytes are held back.
func (s *Stripper) Pending() int { return len(s.pending) }

// Replace returns text with every marker replaced by fn(marker). Returning "" removes the marker.
func Replace(text string, fn func(Marker) string) string {
	ms := Markers(text)
	if len(ms) == 0 {
		return text
	}
	var b strings.Builder
	b.Grow(len(text))
	last := 0
	for _, m := range ms {
		b.WriteString(text[last:m.Start])
		b.WriteString(fn(m))
		last = m.End
	}
	b.WriteString(text[last:])
	return b.String()
}

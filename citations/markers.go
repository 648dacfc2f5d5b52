// Package citations holds citegate's citation rules: the [^n^] marker grammar, extraction and
// stripping (also for streamed text), the per-run source registry built from tool results, and the
// verification of an answer's markers against that registry. It uses the standard library only.
package citations

import (
	"bytes"
	"strings"
)

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

// Strip removes every marker from text and leaves everything else byte for byte. Removing a marker
// can join its neighbours into a new one ("[^1[^2^]^]" → "[^1^]"); Strip removes those too, so its
// result never holds a marker: Strip(Strip(x)) == Strip(x).
func Strip(text string) string {
	if !strings.Contains(text, "[^") {
		return text
	}
	var r reducer
	r.out = make([]byte, 0, len(text))
	r.write(text)
	return string(r.out)
}

// reducer appends text to out and removes a marker as soon as its closing ']' arrives. Because out
// never holds a marker, a new one can only end at the byte just appended.
type reducer struct {
	out []byte
}

func (r *reducer) write(s string) {
	for len(s) > 0 {
		k := strings.IndexByte(s, ']')
		if k < 0 {
			r.out = append(r.out, s...)
			return
		}
		r.out = append(r.out, s[:k+1]...)
		s = s[k+1:]
		if start, ok := markerSuffix(r.out); ok {
			r.out = r.out[:start]
		}
	}
}

// markerSuffix reports whether b ends with a marker and where it starts.
func markerSuffix(b []byte) (int, bool) {
	n := len(b)
	if n < 5 || b[n-1] != ']' || b[n-2] != '^' {
		return 0, false
	}
	j := n - 3
	for j >= 0 && isDigit(b[j]) && n-3-j < MaxDigits {
		j--
	}
	if j == n-3 || j < 1 || b[j] != '^' || b[j-1] != '[' {
		return 0, false
	}
	return j - 1, true
}

// couldBecomeMarker reports whether s (which starts with '[') is a proper prefix of some marker, so
// more input could still turn it into one.
func couldBecomeMarker(s []byte) bool {
	if len(s) == 0 || len(s) >= maxMarkerLen || s[0] != '[' {
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

// Stripper removes markers from a text that arrives in chunks. For any split of a text, the
// concatenation of every Push result and Flush equals Strip(text). It holds back only a tail that could
// still become a marker: a run of marker beginnings such as "[^1" or "[^1[^" (with ordinary text that is
// at most MaxDigits+3 bytes). The zero value is ready to use.
type Stripper struct {
	r reducer
}

// Push takes the next chunk and returns the text that can be shown now.
func (s *Stripper) Push(chunk string) string {
	// Fast path for most deltas: with nothing held back, a marker needs a '[' in this chunk.
	if len(s.r.out) == 0 && strings.IndexByte(chunk, '[') < 0 {
		return chunk
	}
	s.r.write(chunk)
	out := s.r.out
	// Walk back over the trailing segments that each begin with '[' and could still become a marker;
	// a removal further on can join such segments, but nothing before them.
	hold := len(out)
	for hold > 0 {
		i := bytes.LastIndexByte(out[:hold], '[')
		if i < 0 || !couldBecomeMarker(out[i:hold]) {
			break
		}
		hold = i
	}
	if hold == 0 {
		return ""
	}
	emit := string(out[:hold])
	n := copy(out, out[hold:])
	s.r.out = out[:n]
	return emit
}

// Flush returns the held-back tail; it cannot become a marker any more because the text has ended.
func (s *Stripper) Flush() string {
	p := string(s.r.out)
	s.r.out = s.r.out[:0]
	return p
}

// Pending reports how many bytes are held back.
func (s *Stripper) Pending() int { return len(s.r.out) }

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

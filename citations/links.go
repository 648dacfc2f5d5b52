package citations

import (
	"maps"
	"strings"
)

// HiddenLinkNotice replaces a bare or autolinked URL the run did not see (DESIGN §4, link rule).
const HiddenLinkNotice = "〔链接未经核实，已隐藏〕"

// LinkSet holds the URLs an answer may show: the run's registry URLs, every http(s) URL in the
// content of its tool results and in the user's own messages. URLs are kept normalised the way
// registry URLs are (NormalizeURL). The zero value is empty; a nil *LinkSet allows nothing.
type LinkSet struct {
	urls map[string]struct{}
}

// NewLinkSet returns an empty set.
func NewLinkSet() *LinkSet { return &LinkSet{} }

// AddURL adds one URL (e.g. a registry URL); anything that is not an absolute http(s) URL is ignored.
func (s *LinkSet) AddURL(u string) {
	n, ok := NormalizeURL(u)
	if !ok {
		return
	}
	if s.urls == nil {
		s.urls = map[string]struct{}{}
	}
	s.urls[n] = struct{}{}
}

// AddText adds every http(s) URL appearing in text, found by the same URL rules the link filter
// applies to answers (so a URL the answer copies from the text compares equal). A "www." link in the
// text allows both its http and https forms. Text that is a JSON document (a tool result) is also
// read as JSON, so a URL whose characters the encoder escaped ("\u0026", "\/") is found as written
// (linkscan.go). Registry.AddLinks does the same for a tool result while numbering its sources.
func (s *LinkSet) AddText(text string) {
	s.addURLsIn(text)
	s.addJSON(text)
}

// addURLsIn collects URLs with the scanner's URL rules, ignoring markdown structure: in a tool
// result, a URL inside code is as much seen as one outside.
func (s *LinkSet) addURLsIn(text string) {
	if !strings.Contains(text, "://") && !containsWWW(text) {
		return
	}
	b := []byte(text)
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case 'h', 'H':
			h := 0
			if ok, _ := hasPrefixFold(b, i, "https://"); ok {
				h = i + 8
			} else if ok, _ := hasPrefixFold(b, i, "http://"); ok {
				h = i + 7
			} else {
				continue
			}
			end, hostLen, _ := urlEnd(b, i, h, true)
			if hostLen > 0 {
				s.AddURL(string(b[i:end]))
				i = end - 1
			}
		case 'w', 'W':
			if i > 0 && !wwwBoundary(b[i-1]) {
				continue
			}
			if ok, _ := hasPrefixFold(b, i, "www."); !ok {
				continue
			}
			end, hostLen, _ := urlEnd(b, i, i+4, true)
			if hostLen > 0 {
				u := string(b[i:end])
				s.AddURL("http://" + u)
				s.AddURL("https://" + u)
				i = end - 1
			}
		}
	}
}

// MayHoldBareURL reports whether text could contain a bare URL: "://" or "www." in any letter case.
// A text without either passes FilterBareURLs unchanged, so callers use it as a fast path.
func MayHoldBareURL(text string) bool { return strings.Contains(text, "://") || containsWWW(text) }

// containsWWW reports whether s holds "www." in any letter case (a dot after three w or W).
func containsWWW(s string) bool {
	for i := 0; ; {
		k := strings.IndexByte(s[i:], '.')
		if k < 0 {
			return false
		}
		i += k
		if i >= 3 && s[i-3]|0x20 == 'w' && s[i-2]|0x20 == 'w' && s[i-1]|0x20 == 'w' {
			return true
		}
		i++
	}
}

// Allows reports whether u, normalised, is in the set.
func (s *LinkSet) Allows(u string) bool {
	if s == nil || s.urls == nil {
		return false
	}
	n, ok := NormalizeURL(u)
	if !ok {
		return false
	}
	_, in := s.urls[n]
	return in
}

// Len is the number of distinct URLs in the set.
func (s *LinkSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.urls)
}

// Snapshot returns a copy of the set that nothing changes: it may be read from any goroutine while
// s goes on growing in its own.
func (s *LinkSet) Snapshot() *LinkSnapshot {
	if s == nil || len(s.urls) == 0 {
		return &LinkSnapshot{}
	}
	return &LinkSnapshot{set: LinkSet{urls: maps.Clone(s.urls)}}
}

// LinkSnapshot is an immutable LinkSet (Snapshot), safe for concurrent use. A nil *LinkSnapshot
// allows nothing.
type LinkSnapshot struct{ set LinkSet }

// Allows reports whether u, normalised, is in the snapshot.
func (s *LinkSnapshot) Allows(u string) bool { return s != nil && s.set.Allows(u) }

// Len is the number of distinct URLs in the snapshot.
func (s *LinkSnapshot) Len() int {
	if s == nil {
		return 0
	}
	return s.set.Len()
}

// AllowList returns the allow-func of a stored list of URLs (metadata.links.allowed, citation URLs).
func AllowList(urls []string) func(string) bool {
	s := NewLinkSet()
	for _, u := range urls {
		s.AddURL(u)
	}
	return s.Allows
}

// mayHoldLink reports whether text could contain anything the link rule changes: a link needs "](",
// an autolink '<', a bare URL "://" or "www.". Texts without them pass through unchanged.
func mayHoldLink(text string) bool {
	return strings.Contains(text, "://") || strings.Contains(text, "](") || strings.IndexByte(text, '<') >= 0 ||
		containsWWW(text)
}

// FilterLinks applies the link rule outside code to a whole text: a markdown link or image whose
// destination allow rejects keeps only its text (alt text), a rejected autolink or bare URL becomes
// HiddenLinkNotice. It returns the text, the number of hidden links and the distinct verified URLs
// the text shows (normalised, in order of appearance). A nil allow allows nothing.
func FilterLinks(text string, allow func(string) bool) (out string, hidden int, shown []string) {
	if !mayHoldLink(text) {
		return text, 0, nil
	}
	s := newScanner(allow)
	s.buf = []byte(text)
	s.out = make([]byte, 0, len(text))
	s.run(true)
	return string(s.out), s.hidden, s.shown
}

// LinkFilter applies the link rule to a text that arrives in chunks. For any split of a text, the
// concatenation of every Push result and Flush equals FilterLinks(text). It holds back only what it
// cannot decide yet:
//   - a possible URL until the byte after it ("h", "http", "https://a.example/x" at the end of a
//     chunk; at most 2100 bytes, the longest URL considered),
//   - a '[' until its link is complete or cannot be one (the link text is bounded by 512 bytes, a
//     destination by 4200),
//   - a '<' until its autolink closes or cannot,
//   - a backtick run until its closing run arrives or the paragraph ends (an unmatched backtick in a
//     long paragraph is the worst case: the rest of that paragraph is held back until a blank line),
//   - at a line start, the few bytes that decide the kind of line (a fence's info string up to its
//     newline).
//
// The zero value is not usable; use NewLinkFilter.
type LinkFilter struct {
	s *scanner
}

// NewLinkFilter returns a streaming filter with the given allow-func (nil allows nothing).
func NewLinkFilter(allow func(string) bool) *LinkFilter {
	return &LinkFilter{s: newScanner(allow)}
}

// Push takes the next chunk and returns the text that can be shown now.
func (f *LinkFilter) Push(chunk string) string {
	s := f.s
	// Fast path for most deltas: with nothing held back, in the middle of a line, a chunk without
	// any byte that can start a decision (or, in a code line, without a newline) passes unchanged.
	if len(s.buf) == 0 && !s.st.atLineStart && len(chunk) > 0 && !s.collect {
		pass := false
		if s.st.lineCode {
			pass = strings.IndexByte(chunk, '\n') < 0
		} else {
			pass = !strings.ContainsFunc(chunk, func(r rune) bool { return r < 0x80 && special[r] })
		}
		if pass {
			last := chunk[len(chunk)-1]
			s.st.prev, s.lastOut = last, last
			s.base += len(chunk)
			return chunk
		}
	}
	s.buf = append(s.buf, chunk...)
	s.run(false)
	return f.take()
}

// Flush returns the rest; the text has ended, so everything is decided.
func (f *LinkFilter) Flush() string {
	f.s.run(true)
	return f.take()
}

func (f *LinkFilter) take() string {
	if len(f.s.out) == 0 {
		return ""
	}
	p := string(f.s.out)
	f.s.out = f.s.out[:0]
	return p
}

// Hidden is the number of links hidden so far.
func (f *LinkFilter) Hidden() int { return f.s.hidden }

// Shown returns the distinct verified URLs shown so far.
func (f *LinkFilter) Shown() []string { return append([]string(nil), f.s.shown...) }

// Pending reports how many bytes are held back.
func (f *LinkFilter) Pending() int { return len(f.s.buf) }

// SafeText is what a chat channel may send: markers removed (Strip), then the link rule applied.
func SafeText(text string, allow func(string) bool) (string, int) {
	out, hidden, _ := FilterLinks(Strip(text), allow)
	return out, hidden
}

// CodeSpans returns the byte ranges of text that are code by CommonMark's rules (inline code spans,
// fenced and indented code blocks), in order. Markers and links inside them are literal text. The
// scan is the one FilterLinks uses, so both agree on what is code.
func CodeSpans(text string) []Span {
	if strings.IndexByte(text, '`') < 0 && strings.IndexByte(text, '~') < 0 && !strings.Contains(text, "    ") &&
		strings.IndexByte(text, '\t') < 0 {
		return nil
	}
	s := newScanner(nil)
	s.emit, s.collect, s.noLinks = false, true, true
	s.buf = []byte(text)
	s.run(true)
	return s.code
}

// literalSpans is CodeSpans plus autolinks ("<https://…>"): goldmark parses no marker inside either.
func literalSpans(text string) []Span {
	if strings.IndexByte(text, '<') < 0 {
		return CodeSpans(text)
	}
	s := newScanner(nil)
	s.emit, s.collect, s.noLinks, s.literal = false, true, true, true
	s.buf = []byte(text)
	s.run(true)
	return s.code
}

// MarkersOutsideCode returns the markers of text that are not inside code (nor inside an autolink,
// whose text is its URL): the markers that can be citations.
func MarkersOutsideCode(text string) []Marker {
	var out []Marker
	forMarkersOutsideCode(text, func(m Marker) { out = append(out, m) })
	return out
}

// forMarkersOutsideCode calls fn for every marker of MarkersOutsideCode(text), in order, without
// collecting them: Verify reads each marker once. The code scan runs only when there is a marker.
func forMarkersOutsideCode(text string, fn func(Marker)) {
	var code []Span
	scanned := false
	k := 0
	for i := 0; i < len(text); {
		j := strings.Index(text[i:], "[^")
		if j < 0 {
			return
		}
		i += j
		n, end, ok := matchAt(text, i)
		if !ok {
			i++
			continue
		}
		m := Marker{N: n, Start: i, End: end}
		i = end
		if !scanned {
			code, scanned = literalSpans(text), true
		}
		for k < len(code) && code[k].End <= m.Start {
			k++
		}
		if k < len(code) && code[k].Start < m.End {
			continue
		}
		fn(m)
	}
}

// FilterBareURLs applies only the bare-URL part of the link rule to plain text (no markdown: no
// code, no links): every http(s) or "www." URL allow rejects becomes HiddenLinkNotice. Renderers
// use it on the text of their HTML output, after markdown has been interpreted, so that text that
// only reads as a URL once rendered ("http[s](x)://…", "https&#58;//…") is caught too.
func FilterBareURLs(text string, allow func(string) bool) (string, int) {
	if !MayHoldBareURL(text) {
		return text, 0
	}
	s := newScanner(allow)
	s.buf = []byte(text)
	s.out = make([]byte, 0, len(text))
	b := s.buf
	for i := 0; i < len(b); {
		switch b[i] {
		case 'h', 'H':
			i, _ = s.bareURL(i, true)
		case 'w', 'W':
			i, _ = s.wwwURL(i, true)
		default:
			j := i + 1
			for j < len(b) && b[j] != 'h' && b[j] != 'H' && b[j] != 'w' && b[j] != 'W' {
				j++
			}
			s.put(tokText, i, j, "")
			i = j
		}
	}
	return string(s.out), s.hidden
}

package citations

import (
	"unicode"
	"unicode/utf8"
)

// This file holds the one scanner behind the code rule and the link rule (DESIGN §4). It reads an
// answer as CommonMark does where it matters for those rules: inline code spans, fenced and indented
// code blocks (what is code), markdown links and images, autolinks and bare http(s)/www URLs (what a
// person could follow). Verify uses it to ignore markers in code (CodeSpans), FilterLinks and the
// streaming LinkFilter use it to rewrite links outside code.
//
// The scanner is incremental by construction, like the marker reducer: it consumes its buffer one
// token at a time, and a token is only decided when the bytes that decide it are present. When they
// are not (a URL that may go on, a "[text](" whose ")" has not arrived, a backtick run whose closer
// may still come), it stops and waits for more input without changing its state. FilterLinks runs it
// once over the whole text with final=true; LinkFilter runs it after every Push with final=false and
// once more in Flush. Because every decision depends only on the bytes, never on where a chunk
// ended, both produce the same output for any split of the text.

// Span is a byte range [Start, End) of a text.
type Span struct{ Start, End int }

// maxLinkText bounds the text of a markdown link or image the scanner considers: a longer "[...]" is
// scanned as ordinary text (its destination, if any, then meets the bare-URL rule). It bounds how much
// the streaming filter holds back after a '['.
const maxLinkText = 512

// maxLinkCode bounds the code spans in one link text; more make the "[" ordinary text. With
// maxLinkText it bounds the work a '[' costs.
const maxLinkCode = 8

// maxRun is the longest backtick run that can open or close a code span; a longer run is literal
// text. It keeps a stream of backticks from being rescanned on every chunk.
const maxRun = 256

// maxURLScan bounds a bare URL: past it, the URL token ends. A longer URL is therefore hidden even
// when verified (browsers and models keep URLs under ~2000 bytes); the rest of such a run is shown
// as text, without its host. The bound also bounds what the streaming filter holds back for a URL.
const maxURLScan = 2100

// maxInfo bounds how far a backtick fence's line is read for a backtick that would make it no fence.
const maxInfo = 1024

// maxDest bounds a link destination or autolink; longer ones are not links to the scanner.
const maxDest = 4200

// maxParens bounds the nesting of parentheses in a link destination, as CommonMark implementations do.
const maxParens = 32

// maxSubDepth bounds the nesting of link text filtered inside link text.
const maxSubDepth = 4

type tokKind uint8

const (
	tokText tokKind = iota // verbatim, outside code
	tokCode                // verbatim, code (literal text for markers and links)
	tokRep                 // replaced by rep
)

// scanState is the scanner's committed state between tokens.
type scanState struct {
	atLineStart bool
	inPara      bool // the previous line belongs to a paragraph (indented code cannot start, lines continue it)
	paraQuote   int  // blockquote depth of the current paragraph
	inList      bool // inside a list: indented lines are list content, not code
	lineCode    bool // the rest of the current line is code
	lineEnds    bool // the current line ends the paragraph (heading, thematic break, setext underline)
	lineList    bool // the current line starts a list item
	listCol     int  // content column of the last list item: 4 columns more start code
	// An open fenced code block: its character, length, blockquote depth, and whether it was opened
	// inside a list item (then a closing fence may be indented any amount).
	fence      byte
	fenceLen   int
	fenceQuote int
	fenceFree  bool
	closeFence bool // the current line closes the fence
	prev       byte // the last byte consumed before the buffer
}

type scanner struct {
	allow  func(string) bool
	st     scanState
	buf    []byte
	base   int // absolute offset of buf[0]
	out    []byte
	hidden int
	shown  []string
	seen   map[string]bool
	code   []Span // absolute code ranges, when collect is set
	// collect records code ranges; emit builds the output.
	collect, emit bool
	depth         int
	lastOut       byte // the last byte written (also when emit is off)
	// failed[r] is the absolute offset of the paragraph end before which no backtick run of length r
	// has a closer: an opener of that length before it is literal text without another search.
	failed map[int]int
	resume resumePoint
	rp     rpMemo
	// noLinks skips markdown links (CodeSpans: links do not change what is code).
	noLinks bool
	// literal also records autolinks among the code ranges (literalSpans).
	literal bool
}

// resumePoint remembers how far the closer search of a held-back backtick run got.
type resumePoint struct{ open, run, at int }

func newScanner(allow func(string) bool) *scanner {
	return &scanner{allow: allow, st: scanState{atLineStart: true}, emit: true, rp: rpMemo{at: -1}}
}

// run consumes as much of the buffer as can be decided and keeps the rest.
func (s *scanner) run(final bool) {
	i := 0
	for i < len(s.buf) {
		n, ok := s.step(i, final)
		if !ok {
			break
		}
		i = n
	}
	if i > 0 {
		s.st.prev = s.buf[i-1]
		s.buf = s.buf[:copy(s.buf, s.buf[i:])]
		s.base += i
	}
}

func (s *scanner) put(kind tokKind, from, to int, rep string) {
	switch kind {
	case tokCode:
		if s.collect && to > from {
			if n := len(s.code); n > 0 && s.code[n-1].End == s.base+from {
				s.code[n-1].End = s.base + to
			} else {
				s.code = append(s.code, Span{s.base + from, s.base + to})
			}
		}
		fallthrough
	case tokText:
		s.write(s.buf[from:to])
	case tokRep:
		s.write([]byte(rep))
	}
}

// putLiteral records [from, to) as literal text that is not code (an autolink, whose text is its
// URL: markers there are not citations either).
func (s *scanner) putLiteral(from, to int) {
	s.code = append(s.code, Span{s.base + from, s.base + to})
}

func (s *scanner) noteShown(u string) {
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	if !s.seen[u] {
		s.seen[u] = true
		s.shown = append(s.shown, u)
	}
}

func (s *scanner) allowed(u string) bool {
	n, ok := NormalizeURL(u)
	if !ok || s.allow == nil || !s.allow(n) {
		return false
	}
	s.noteShown(n)
	return true
}

// step decides the token at buf[i] and returns where the next one starts; ok is false when more
// input is needed (never when final).
func (s *scanner) step(i int, final bool) (int, bool) {
	if s.st.atLineStart {
		return s.lineStart(i, final)
	}
	if s.st.lineCode {
		j := indexByteFrom(s.buf, i, '\n')
		if j < 0 {
			s.put(tokCode, i, len(s.buf), "")
			return len(s.buf), true
		}
		s.put(tokCode, i, j+1, "")
		s.st.lineCode = false
		s.st.atLineStart = true
		if s.st.closeFence {
			s.st.fence, s.st.closeFence = 0, false
		}
		return j + 1, true
	}
	return s.inline(i, final)
}

func indexByteFrom(b []byte, i int, c byte) int {
	for j := i; j < len(b); j++ {
		if b[j] == c {
			return j
		}
	}
	return -1
}

// lineInfo describes the start of a line. need reports that the line's kind is not decided yet.
type lineInfo struct {
	quote  int  // blockquote depth
	indent int  // columns of indentation after the blockquote markers
	p      int  // first non-blank byte after the indentation (len when none)
	blank  bool // only spaces and tabs up to the newline (or the end)
	eol    int  // offset of a blank line's newline, -1 when not in the buffer
}

// parseLine reads the container prefix (blockquote markers) and indentation of the line at i.
func parseLine(b []byte, i int, final bool) (li lineInfo, need bool) {
	j := i
	for {
		k, col := j, 0
		for k < len(b) && b[k] == ' ' && col < 3 {
			k++
			col++
		}
		if k < len(b) && b[k] == '>' {
			li.quote++
			j = k + 1
			if j < len(b) && b[j] == ' ' {
				j++
			}
			continue
		}
		if k == len(b) && !final {
			return li, true
		}
		break
	}
	col := 0
	for j < len(b) && (b[j] == ' ' || b[j] == '\t') {
		if b[j] == '\t' {
			col += 4 - col%4
		} else {
			col++
		}
		j++
	}
	li.indent, li.p = col, j
	li.eol = -1
	if j == len(b) {
		if !final {
			return li, true
		}
		li.blank = true
		return li, false
	}
	if b[j] == '\r' && j+1 == len(b) && !final {
		return li, true
	}
	li.blank = b[j] == '\n' || b[j] == '\r' && j+1 < len(b) && b[j+1] == '\n'
	if li.blank {
		li.eol = indexByteFrom(b, j, '\n')
	}
	return li, false
}

// fenceOpen reports an opening code fence at b[p]: three or more '`' or '~'; a backtick fence's info
// string may not contain a backtick, so that decision waits for the end of the line.
func fenceOpen(b []byte, p int, final bool) (c byte, n int, ok, need bool) {
	if p >= len(b) || (b[p] != '`' && b[p] != '~') {
		return 0, 0, false, false
	}
	c = b[p]
	j := p
	for j < len(b) && b[j] == c {
		j++
	}
	if j-p > maxRun {
		return 0, 0, false, false // as long backtick runs are literal text, so are long fences
	}
	if j == len(b) && !final {
		return 0, 0, false, true
	}
	n = j - p
	if n < 3 {
		return 0, 0, false, false
	}
	if c == '`' {
		// The info string is read up to maxInfo bytes: a backtick further on does not undo the fence.
		for ; j < len(b) && b[j] != '\n' && j-p < maxInfo; j++ {
			if b[j] == '`' {
				return 0, 0, false, false
			}
		}
		if j == len(b) && !final {
			return 0, 0, false, true
		}
	}
	return c, n, true, false
}

// fenceClose reports a closing fence for (c, n) at b[p]: a run of c at least n long, then only
// spaces and tabs to the end of the line.
func fenceClose(b []byte, p int, c byte, n int, final bool) (ok, need bool) {
	j := p
	for j < len(b) && b[j] == c {
		j++
	}
	if j-p < n {
		if j == len(b) && !final {
			return false, true
		}
		return false, false
	}
	for j < len(b) && (b[j] == ' ' || b[j] == '\t' || b[j] == '\r') {
		j++
	}
	if j == len(b) {
		return final, !final
	}
	return b[j] == '\n', false
}

// listMarker reports a list item marker at b[p] ("-", "*", "+", "1." or "1)" followed by a space,
// tab or the end of the line) and where the item's content starts.
func listMarker(b []byte, p int, final bool) (content int, ok, need bool) {
	j := p
	if j >= len(b) {
		return 0, false, !final
	}
	switch c := b[j]; {
	case c == '-' || c == '*' || c == '+':
		j++
	case isDigit(c):
		for j < len(b) && isDigit(b[j]) && j-p < 9 {
			j++
		}
		if j == len(b) {
			return 0, false, !final
		}
		if b[j] != '.' && b[j] != ')' {
			return 0, false, false
		}
		j++
	default:
		return 0, false, false
	}
	if j == len(b) {
		return j, final, !final
	}
	if b[j] != ' ' && b[j] != '\t' && b[j] != '\n' {
		return 0, false, false
	}
	for j < len(b) && (b[j] == ' ' || b[j] == '\t') {
		j++
	}
	if j == len(b) && !final {
		return 0, false, true
	}
	return j, true, false
}

// onlyRun reports whether the line from p holds only the byte c (at least min times) and spaces:
// a thematic break ("***", "- - -") or a setext underline ("===").
func onlyRun(b []byte, p int, c byte, minCount int, final bool) (ok, need bool) {
	n := 0
	j := p
	for ; j < len(b) && b[j] != '\n'; j++ {
		switch b[j] {
		case c:
			n++
		case ' ', '\t', '\r':
		default:
			return false, false
		}
	}
	if j == len(b) && !final {
		return false, true
	}
	return n >= minCount, false
}

// atxHeading reports "#" to "######" followed by a space, tab or the end of the line.
func atxHeading(b []byte, p int, final bool) (ok, need bool) {
	j := p
	for j < len(b) && b[j] == '#' && j-p < 7 {
		j++
	}
	n := j - p
	if n == 0 || n > 6 {
		return false, false
	}
	if j == len(b) {
		return final, !final
	}
	return b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r', false
}

// interrupts reports whether a line starting at b[p] (after indentation < 4) begins a block that
// ends a paragraph: heading, thematic break, setext underline, fence or list item.
func interrupts(b []byte, p int, final bool) (ends bool, need bool) {
	if p >= len(b) {
		return false, !final
	}
	switch b[p] {
	case '#':
		return atxHeading(b, p, final)
	case '=':
		return onlyRun(b, p, '=', 1, final)
	case '`', '~':
		_, _, ok, need := fenceOpen(b, p, final)
		return ok, need
	case '-', '*', '_':
		ok, need := onlyRun(b, p, b[p], 3, final)
		if ok || need || b[p] == '_' {
			return ok, need
		}
		if b[p] == '-' {
			// A "-" line is a setext underline under a paragraph.
			if ok, need := onlyRun(b, p, '-', 1, final); ok || need {
				return ok, need
			}
		}
		c, ok, need := listMarker(b, p, final)
		if need {
			return false, true
		}
		// An empty list item cannot interrupt a paragraph.
		return ok && c < len(b) && b[c] != '\n', false
	case '+', '1':
		c, ok, need := listMarker(b, p, final)
		if need {
			return false, true
		}
		if ok && b[p] == '1' && !(c >= p+2 && (b[p+1] == '.' || b[p+1] == ')')) {
			return false, false // only a list starting at 1 interrupts a paragraph
		}
		return ok && c < len(b) && b[c] != '\n', false
	}
	return false, false
}

// continuesPara reports whether the line starting at b[j] continues the current paragraph.
func (s *scanner) continuesPara(b []byte, j int, final bool) (cont, need bool) {
	li, need := parseLine(b, j, final)
	if need {
		return false, true
	}
	if li.blank || li.quote > s.st.paraQuote {
		return false, false
	}
	if li.indent >= 4 {
		return true, false
	}
	ends, need := interrupts(b, li.p, final)
	return !ends, need
}

// lineStart classifies the line at buf[i] and commits the state for it.
func (s *scanner) lineStart(i int, final bool) (int, bool) {
	b := s.buf
	li, need := parseLine(b, i, final)
	if need {
		return i, false
	}
	st := &s.st
	if st.fence != 0 && li.quote < st.fenceQuote {
		st.fence = 0 // the blockquote holding the fence ended, and the fence with it
	}
	if st.fence != 0 {
		if li.indent < 4 || st.fenceFree {
			ok, need := fenceClose(b, li.p, st.fence, st.fenceLen, final)
			if need {
				return i, false
			}
			st.closeFence = ok
		}
		st.atLineStart, st.lineCode = false, true
		return i, true
	}
	if li.blank {
		end := len(b)
		if li.eol >= 0 {
			end = li.eol + 1
		}
		s.put(tokText, i, end, "")
		st.inPara, st.lineEnds, st.lineList = false, false, false
		st.atLineStart = li.eol >= 0
		if !st.atLineStart {
			st.lineCode = false
		}
		return end, true
	}
	p := li.p
	inList := st.inList
	lineList := false
	listCol := st.listCol
	if li.indent < 4 || inList && li.indent < st.listCol+4 {
		if c, ok, need := listMarker(b, p, final); need {
			return i, false
		} else if ok {
			lineList, inList = true, true
			listCol = li.indent + (c - p)
			m := p + 1 // the marker's end
			for m < c && isDigit(b[m-1]) {
				m++
			}
			switch {
			case c == len(b) || b[c] == '\n' || b[c] == '\r':
				listCol = li.indent + (m - p) + 1 // an empty item's content starts one past the marker
			case c-m >= 5:
				// Five or more spaces after the marker: the content starts one past it and the rest
				// of the line is an indented code block inside the item.
				listCol = li.indent + (m - p) + 1
				st.inList, st.listCol, st.inPara, st.lineList = true, listCol, false, true
				st.atLineStart, st.lineCode = false, true
				return i, true
			}
			p = c
		}
	}
	if !lineList && li.indent == 0 && !st.inPara {
		inList = false // a paragraph at the margin ends the list
	}
	if li.indent < 4 || inList {
		c, n, ok, need := fenceOpen(b, p, final)
		if need {
			return i, false
		}
		if ok {
			st.fence, st.fenceLen, st.fenceQuote, st.fenceFree = c, n, li.quote, inList
			st.closeFence = false
			st.inList, st.inPara = inList, false
			st.atLineStart, st.lineCode = false, true
			return i, true
		}
	}
	if !st.inPara && !lineList && (li.indent >= 4 && !inList || inList && li.indent >= listCol+4) {
		st.inList, st.listCol = inList, listCol
		st.atLineStart, st.lineCode = false, true
		return i, true
	}
	ends := false
	if li.indent < 4 && !lineList {
		switch b[p] {
		case '#', '=', '-', '*', '_':
			e, need := interrupts(b, p, final)
			if need {
				return i, false
			}
			ends = e
		}
	}
	if !st.inPara || lineList || li.quote > st.paraQuote {
		st.paraQuote = li.quote
	}
	st.inList, st.lineEnds, st.lineList, st.listCol = inList, ends, lineList, listCol
	st.atLineStart = false
	return i, true
}

// special marks the bytes at which inline scanning stops to decide something.
var special = func() (t [256]bool) {
	for _, c := range []byte("\\`<[!hHwW\n") {
		t[c] = true
	}
	return
}()

// inline scans text-line content up to and including the newline.
func (s *scanner) inline(i int, final bool) (int, bool) {
	b := s.buf
	if !special[b[i]] {
		j := i + 1
		for j < len(b) && !special[b[j]] {
			j++
		}
		s.put(tokText, i, j, "")
		return j, true
	}
	switch b[i] {
	case '\n':
		s.put(tokText, i, i+1, "")
		s.st.atLineStart = true
		s.st.inPara = !s.st.lineEnds
		s.st.lineEnds, s.st.lineList = false, false
		return i + 1, true
	case '\\':
		if i+1 == len(b) {
			if !final {
				return i, false
			}
			s.put(tokText, i, i+1, "")
			return i + 1, true
		}
		if isASCIIPunct(b[i+1]) {
			s.put(tokText, i, i+2, "")
			return i + 2, true
		}
		s.put(tokText, i, i+1, "")
		return i + 1, true
	case '`':
		return s.codeSpan(i, final)
	case '<':
		return s.autolink(i, final)
	case '!':
		if i+1 == len(b) && !final {
			return i, false
		}
		if i+1 < len(b) && b[i+1] == '[' {
			if s.depth < maxSubDepth && !s.noLinks {
				if end, ok, need := s.link(i, i+1, final); need {
					return i, false
				} else if ok {
					return end, true
				}
			}
			s.put(tokText, i, i+2, "")
			return i + 2, true
		}
		s.put(tokText, i, i+1, "")
		return i + 1, true
	case '[':
		if _, end, ok := matchAt(string(b[i:min(len(b), i+maxMarkerLen)]), 0); ok {
			s.put(tokText, i, i+end, "")
			return i + end, true
		}
		if !final && len(b)-i < maxMarkerLen && couldBecomeMarker(b[i:]) {
			return i, false
		}
		if s.depth < maxSubDepth && !s.noLinks {
			if end, ok, need := s.link(i, i, final); need {
				return i, false
			} else if ok {
				return end, true
			}
		}
		s.put(tokText, i, i+1, "")
		return i + 1, true
	case 'h', 'H':
		return s.bareURL(i, final)
	case 'w', 'W':
		return s.wwwURL(i, final)
	}
	s.put(tokText, i, i+1, "")
	return i + 1, true
}

func isASCIIPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}

// findCloser looks for a backtick run of exactly r bytes from b[j] within the paragraph and before
// limit (0: no limit). It returns the end of the closer, or found=false with the paragraph's end;
// when it needs more input, paraEnd is where the search can resume.
func (s *scanner) findCloser(b []byte, j, r, limit int, final bool) (end int, found bool, paraEnd int, need bool) {
	for j < len(b) {
		if limit > 0 && j >= limit {
			return 0, false, -1, false
		}
		switch b[j] {
		case '`':
			k := j
			for k < len(b) && b[k] == '`' {
				k++
			}
			if k == len(b) && !final {
				return 0, false, j, true
			}
			if k-j == r {
				return k, true, 0, false
			}
			j = k
		case '\n':
			cont, need := s.continuesPara(b, j+1, final)
			if need {
				return 0, false, j, true
			}
			if !cont {
				return 0, false, j, false
			}
			j++
		default:
			j++
		}
	}
	if !final {
		return 0, false, j, true
	}
	return 0, false, len(b), false
}

// codeSpan handles a backtick run: with a closer of the same length in the paragraph it is a code
// span (literal text); without one the run is literal text and scanning goes on after it.
func (s *scanner) codeSpan(i int, final bool) (int, bool) {
	b := s.buf
	prev := s.st.prev
	if i > 0 {
		prev = b[i-1]
	}
	k := i
	for k < len(b) && b[k] == '`' && k-i <= maxRun {
		k++
	}
	if s.base+i > 0 && prev == '`' || k-i > maxRun {
		// Part of a run longer than maxRun: literal text, however it arrives.
		s.put(tokText, i, k, "")
		return k, true
	}
	if k == len(b) && !final {
		return i, false
	}
	r := k - i
	if f, ok := s.failed[r]; ok && s.base+i < f {
		s.put(tokText, i, k, "")
		return k, true
	}
	from := k
	if s.resume.open == s.base+i && s.resume.run == r {
		from = s.resume.at - s.base
	}
	end, found, paraEnd, need := s.findCloser(b, from, r, 0, final)
	if need {
		// The search so far found no closer; the next Push goes on from where it stopped instead
		// of reading the whole held-back paragraph again.
		s.resume = resumePoint{open: s.base + i, run: r, at: s.base + paraEnd}
		return i, false
	}
	if !found {
		if s.failed == nil {
			s.failed = map[int]int{}
		}
		s.failed[r] = s.base + paraEnd
		s.put(tokText, i, k, "")
		return k, true
	}
	s.put(tokCode, i, end, "")
	return end, true
}

// autolink handles '<': "<scheme:...>" is an autolink (kept when verified, otherwise the notice);
// anything else leaves '<' as text.
func (s *scanner) autolink(i int, final bool) (int, bool) {
	b := s.buf
	j := i + 1
	for j < len(b) && j-i-1 < 32 && (isASCIILetter(b[j]) || j > i+1 && (isDigit(b[j]) || b[j] == '+' || b[j] == '.' || b[j] == '-')) {
		j++
	}
	if j == len(b) {
		if !final && j-i-1 < 32 {
			return i, false
		}
		s.put(tokText, i, i+1, "")
		return i + 1, true
	}
	if b[j] != ':' || j-i-1 < 2 {
		s.put(tokText, i, i+1, "")
		return i + 1, true
	}
	k := j + 1
	for k < len(b) && k-i < maxDest && b[k] != '>' && b[k] != '<' && b[k] > ' ' && b[k] != 0x7f {
		k++
	}
	if k == len(b) && !final && k-i < maxDest {
		return i, false
	}
	if k == len(b) || b[k] != '>' {
		s.put(tokText, i, i+1, "")
		return i + 1, true
	}
	if s.literal {
		s.putLiteral(i, k+1)
	}
	if s.allowed(string(b[i+1 : k])) {
		s.put(tokText, i, k+1, "")
	} else {
		s.hidden++
		s.put(tokRep, i, k+1, HiddenLinkNotice)
	}
	return k + 1, true
}

func isASCIILetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// hostByte and pathByte are the URL characters of goldmark's linkify (GFM extended autolinks),
// without the ones that end a URL in an answer: quotes, brackets (a marker may follow a URL),
// braces, '^', '>' and the backtick. The renderer configures goldmark's linkify with the same sets.
func hostByte(c byte) bool {
	return isASCIILetter(c) || isDigit(c) || c == '-' || c == '@' || c == ':' || c == '%' || c == '.' ||
		c == '_' || c == '+' || c == '~' || c == '#' || c == '='
}

func pathByte(c byte) bool {
	return hostByte(c) || c == '$' || c == '!' || c == '?' || c == '&' || c == '/' || c == '(' || c == ')' ||
		c == ';' || c == ','
}

// urlEnd returns the end of the URL whose host starts at b[h] (after "://" or at "www."), with the
// trailing punctuation rules of GFM extended autolinks, or need when the URL may go on.
func urlEnd(b []byte, start, h int, final bool) (end int, hostLen int, need bool) {
	j := h
	stop := min(len(b), start+maxURLScan)
	if j < stop && b[j] >= utf8.RuneSelf {
		// An internationalised host: letters and digits of any script, dots and hyphens.
		for j < stop {
			if b[j] == '.' || b[j] == '-' || isASCIILetter(b[j]) || isDigit(b[j]) {
				j++
				continue
			}
			if b[j] < utf8.RuneSelf {
				break
			}
			if !utf8.FullRune(b[j:]) && !final {
				return 0, 0, true
			}
			r, size := utf8.DecodeRune(b[j:])
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.Is(unicode.Mn, r) {
				break
			}
			j += size
		}
	} else {
		for j < stop && hostByte(b[j]) {
			j++
		}
	}
	hostEnd := j
	if j < stop && (b[j] == '/' || b[j] == '?' || b[j] == '#') {
		for j < stop && pathByte(b[j]) {
			j++
		}
	}
	if j == len(b) && !final && j < start+maxURLScan {
		return 0, 0, true
	}
	// Trailing punctuation is not part of the URL; a ')' is when it balances a '('.
	opening, closing := 0, 0
	for _, c := range b[start:j] {
		switch c {
		case '(':
			opening++
		case ')':
			closing++
		}
	}
	e := j
loop:
	for e > h {
		switch b[e-1] {
		case '?', '!', '.', ',', ':', '*', '_', '~':
			e--
		case ')':
			if closing <= opening {
				break loop
			}
			closing--
			e--
		case ';':
			k := e - 2
			for k > h && (isASCIILetter(b[k]) || isDigit(b[k])) {
				k--
			}
			if k == e-2 || b[k] != '&' {
				break loop
			}
			e = k
		default:
			break loop
		}
	}
	return e, min(e, hostEnd) - h, false
}

// hasPrefixFold reports whether b[i:] starts with the lower-case ASCII word p, ignoring case; part
// is true when b ends inside a match.
func hasPrefixFold(b []byte, i int, p string) (ok, part bool) {
	for k := 0; k < len(p); k++ {
		if i+k == len(b) {
			return false, true
		}
		c := b[i+k]
		if 'A' <= c && c <= 'Z' {
			c |= 0x20
		}
		if c != p[k] {
			return false, false
		}
	}
	return true, false
}

// bareURL handles 'h': "http://" or "https://" (any case) starts a URL anywhere outside code.
func (s *scanner) bareURL(i int, final bool) (int, bool) {
	b := s.buf
	h := 0
	ok1, part1 := hasPrefixFold(b, i, "https://")
	ok2, part2 := hasPrefixFold(b, i, "http://")
	switch {
	case ok1:
		h = i + 8
	case ok2:
		h = i + 7
	case (part1 || part2) && !final:
		return i, false
	default:
		s.put(tokText, i, i+1, "")
		return i + 1, true
	}
	end, hostLen, need := urlEnd(b, i, h, final)
	if need {
		return i, false
	}
	if hostLen == 0 {
		s.put(tokText, i, h, "")
		return h, true
	}
	s.urlToken(i, end, string(b[i:end]))
	return end, true
}

func (s *scanner) urlToken(i, end int, u string) {
	if s.allowed(u) {
		s.put(tokText, i, end, "")
		return
	}
	s.hidden++
	s.put(tokRep, i, end, HiddenLinkNotice)
}

// wwwBoundary reports whether a "www." link may start after the byte c: not inside a word, a host
// or a path.
func wwwBoundary(c byte) bool {
	return !(isASCIILetter(c) || isDigit(c) || c == '.' || c == '-' || c == '_' || c == '/' || c == '@' || c == ':')
}

// wwwURL handles 'w': "www.host.tld" after a boundary is a link as goldmark's linkify makes it.
func (s *scanner) wwwURL(i int, final bool) (int, bool) {
	b := s.buf
	prev := s.st.prev
	if i > 0 {
		prev = b[i-1]
	}
	if s.base+i > 0 && !wwwBoundary(prev) {
		s.put(tokText, i, i+1, "")
		return i + 1, true
	}
	ok, part := hasPrefixFold(b, i, "www.")
	if !ok {
		if part && !final {
			return i, false
		}
		s.put(tokText, i, i+1, "")
		return i + 1, true
	}
	end, hostLen, need := urlEnd(b, i, i+4, final)
	if need {
		return i, false
	}
	host := b[i+4 : i+4+hostLen]
	dot := lastIndexByte(host, '.')
	if hostLen == 0 || dot <= 0 || dot == len(host)-1 || !isASCIILetter(host[dot+1]) {
		s.put(tokText, i, i+1, "")
		return i + 1, true
	}
	u := string(b[i:end])
	if s.allowed("https://"+u) || s.allowed("http://"+u) {
		s.put(tokText, i, end, "")
		return end, true
	}
	s.hidden++
	s.put(tokRep, i, end, HiddenLinkNotice)
	return end, true
}

func lastIndexByte(b []byte, c byte) int {
	for j := len(b) - 1; j >= 0; j-- {
		if b[j] == c {
			return j
		}
	}
	return -1
}

// link handles "[text](dest "title")" at b[open] ('[') and images "![alt](...)" (bang < open). It
// returns ok=false when the bytes there are not such a link; the caller then scans them as text.
func (s *scanner) link(bang, open int, final bool) (end int, ok, need bool) {
	b := s.buf
	// The link text: brackets balance, backslash escapes and code spans are skipped.
	limit := open + maxLinkText
	if rp, need := s.nextLinkClose(open+1, final); need {
		return 0, false, true
	} else if rp < 0 || rp >= limit {
		return 0, false, false // no "](" near enough: no inline link can start here
	}
	depth, spans := 0, 0
	j := open
	closeAt := -1
	for closeAt < 0 {
		if j >= limit {
			return 0, false, false
		}
		if j >= len(b) {
			if final {
				return 0, false, false
			}
			return 0, false, true
		}
		switch b[j] {
		case '\\':
			if j+1 == len(b) && !final {
				return 0, false, true
			}
			j += 2
			continue
		case '`':
			k := j
			for k < len(b) && b[k] == '`' {
				k++
			}
			if k == len(b) && !final {
				return 0, false, true
			}
			if spans++; spans > maxLinkCode {
				return 0, false, false
			}
			e, found, _, need := s.findCloser(b, k, k-j, limit, final)
			if need {
				return 0, false, true
			}
			if found {
				j = e
			} else {
				j = k
			}
			continue
		case '[':
			depth++
		case ']':
			depth--
			if depth == 0 {
				closeAt = j
			}
		case '\n':
			cont, need := s.continuesPara(b, j+1, final)
			if need {
				return 0, false, true
			}
			if !cont {
				return 0, false, false
			}
		}
		j++
	}
	// The destination must follow at once.
	j = closeAt + 1
	if j == len(b) {
		return 0, false, !final
	}
	if b[j] != '(' {
		return 0, false, false
	}
	j++
	for j < len(b) && (b[j] == ' ' || b[j] == '\t') {
		j++
	}
	var dest []byte
	switch {
	case j == len(b):
		return 0, false, !final
	case b[j] == '<':
		k := j + 1
		for k < len(b) && b[k] != '>' && b[k] != '<' && b[k] != '\n' && k-j < maxDest {
			if b[k] == '\\' {
				k++
			}
			k++
		}
		if k >= len(b) {
			return 0, false, !final && k-j < maxDest
		}
		if b[k] != '>' {
			return 0, false, false
		}
		dest = b[j+1 : k]
		j = k + 1
	default:
		parens := 0
		k := j
	dest:
		for k < len(b) && k-j < maxDest {
			switch c := b[k]; {
			case c == '\\' && k+1 < len(b) && isASCIIPunct(b[k+1]):
				k += 2
				continue
			case c == '\\' && k+1 == len(b):
				if !final {
					return 0, false, true
				}
				break dest
			case c == '`':
				// A backtick in a destination belongs to a code span, which binds tighter.
				return 0, false, false
			case c == '(':
				if parens++; parens > maxParens {
					return 0, false, false
				}
			case c == ')':
				if parens == 0 {
					break dest
				}
				parens--
			case c <= ' ' || c == 0x7f:
				break dest
			}
			k++
		}
		if k >= len(b) {
			return 0, false, !final && k-j < maxDest
		}
		if k-j >= maxDest || parens != 0 {
			return 0, false, false
		}
		dest = b[j:k]
		j = k
	}
	destEnd := j
	for j < len(b) && (b[j] == ' ' || b[j] == '\t') {
		j++
	}
	titleStart, titleEnd := -1, -1
	if j < len(b) && j > destEnd && (b[j] == '"' || b[j] == '\'' || b[j] == '(') {
		q := b[j]
		if q == '(' {
			q = ')'
		}
		k := j + 1
		for k < len(b) && b[k] != q && b[k] != '\n' && k-j < maxDest {
			if b[k] == '\\' {
				k++
			}
			k++
		}
		if k >= len(b) {
			return 0, false, !final && k-j < maxDest
		}
		if b[k] != q {
			return 0, false, false
		}
		titleStart, titleEnd = j+1, k
		j = k + 1
		for j < len(b) && (b[j] == ' ' || b[j] == '\t') {
			j++
		}
	}
	if j == len(b) {
		return 0, false, !final
	}
	if b[j] != ')' {
		return 0, false, false
	}
	end = j + 1
	// Decided: a link. Its text (or alt text) is filtered like any text; the destination decides
	// whether the link stays.
	keep := s.allowed(unescape(dest))
	if !keep && end == len(b) && !final {
		return 0, false, true // the byte after the link decides the seam below
	}
	inner := s.sub(open+1, closeAt)
	if keep {
		s.write(b[bang : open+1])
		s.write(inner)
		if titleStart >= 0 {
			s.write(b[closeAt:titleStart])
			s.write(s.sub(titleStart, titleEnd))
			s.write(b[titleEnd:end])
		} else {
			s.write(b[closeAt:end])
		}
		return end, true, false
	}
	s.hidden++
	// Without its brackets the text could join its neighbours into a URL the scan never saw
	// ("http[s](x)://evil.example", "ww[w](x).evil.example"); a space keeps them apart in that case.
	if len(inner) > 0 && joinable(s.lastOut) && joinable(inner[0]) {
		s.write([]byte{' '})
	}
	s.write(inner)
	if end < len(b) && joinable(s.lastOut) && joinable(b[end]) {
		s.write([]byte{' '})
	}
	return end, true, false
}

// nextLinkClose returns the offset of the first "](" at or after b[i] within maxLinkText bytes, or
// -1 when there is none. Searches are remembered (absolute offsets), so a text full of '[' is read
// once, not once per '['.
func (s *scanner) nextLinkClose(i int, final bool) (int, bool) {
	b := s.buf
	abs := s.base + i
	if s.rp.at >= abs && s.rp.from <= abs {
		return s.rp.at - s.base, false
	}
	from := i
	if s.rp.at < 0 && s.rp.from <= abs && s.rp.upto > abs {
		from = s.rp.upto - s.base // nothing in [rp.from, rp.upto)
	}
	stop := min(len(b), i+maxLinkText+1)
	for k := from; k+1 < stop; k++ {
		if b[k] == ']' && b[k+1] == '(' {
			s.rp = rpMemo{from: abs, at: s.base + k}
			return k, false
		}
	}
	// None in [i, stop-1): a "](" could still start at stop-1.
	s.rp = rpMemo{from: abs, at: -1, upto: s.base + max(stop-1, i)}
	if stop == len(b) && stop < i+maxLinkText+1 && !final {
		return 0, true
	}
	return -1, false
}

// rpMemo remembers the last "](" search: from..at is free of "](" before at (at < 0: none before upto).
type rpMemo struct{ from, at, upto int }

// joinable reports whether c can be part of a URL or a scheme, so that two such bytes meeting after
// an unwrapped link could form one.
func joinable(c byte) bool {
	return hostByte(c) || pathByte(c)
}

func (s *scanner) write(p []byte) {
	if len(p) == 0 {
		return
	}
	s.lastOut = p[len(p)-1]
	if s.emit {
		s.out = append(s.out, p...)
	}
}

// sub filters buf[from:to] (link text or a title) with a scanner of its own, merging its counts,
// shown URLs and code ranges into s.
func (s *scanner) sub(from, to int) []byte {
	t := &scanner{allow: s.allow, st: scanState{inPara: true, paraQuote: s.st.paraQuote, prev: ' '},
		emit: s.emit, collect: s.collect, depth: s.depth + 1, base: s.base + from, rp: rpMemo{at: -1}}
	if from > 0 {
		t.st.prev = s.buf[from-1]
	}
	t.lastOut = s.lastOut
	t.buf = append([]byte(nil), s.buf[from:to]...)
	t.run(true)
	s.hidden += t.hidden
	for _, u := range t.shown {
		s.noteShown(u)
	}
	s.code = append(s.code, t.code...)
	return t.out
}

// unescape removes the backslashes of backslash escapes in a link destination.
func unescape(b []byte) string {
	if indexByteFrom(b, 0, '\\') < 0 {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for k := 0; k < len(b); k++ {
		if b[k] == '\\' && k+1 < len(b) && isASCIIPunct(b[k+1]) {
			k++
		}
		out = append(out, b[k])
	}
	return string(out)
}

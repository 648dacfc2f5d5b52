package citations

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a small strict JSON scanner for tool results. The registry reads each result once:
// it validates the whole document with the grammar encoding/json accepts (so a result that
// encoding/json rejects adds nothing, as before), finds the few members it needs by their byte
// spans, decodes only those strings, and splices "ref" numbers into the original bytes. Decoding a
// result into maps and encoding it again cost several times more than the rest of the work; see
// docs/benchmarks.md. FuzzRegistryAdd checks it against encoding/json.

// maxJSONDepth is encoding/json's nesting limit; deeper documents are invalid there and here.
const maxJSONDepth = 10000

// jsSpan is a half-open byte range [start, end) of the scanned text.
type jsSpan struct{ start, end int }

// jsMember is one member of a JSON object: the key as decoded, the key's start (its opening quote)
// and the value's span.
type jsMember struct {
	key   string
	start int
	val   jsSpan
}

// jsScanner walks one JSON text. ok turns false at the first error and stays false. lk, when set,
// collects during the same pass what the link set reads from the document (linkscan.go).
type jsScanner struct {
	s  string
	i  int
	ok bool
	lk *jsLinks
}

func (p *jsScanner) fail() bool {
	p.ok = false
	return false
}

func (p *jsScanner) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value skips one value starting at p.i (whitespace already skipped) and reports its validity.
func (p *jsScanner) value(depth int) bool {
	if p.i >= len(p.s) {
		return p.fail()
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(depth+1, nil)
	case c == '[':
		return p.array(depth+1, nil)
	case c == '"':
		start := p.i
		escaped, ok := p.str()
		if ok && p.lk != nil && depth <= maxLinkDepth {
			p.lk.str(p.s[start+1:p.i-1], escaped)
		}
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.fail()
}

func (p *jsScanner) literal(lit string) bool {
	if !strings.HasPrefix(p.s[p.i:], lit) {
		return p.fail()
	}
	p.i += len(lit)
	return true
}

func (p *jsScanner) digits() int {
	n := 0
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

func (p *jsScanner) number() bool {
	start, exp := p.i, false
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.s) && p.s[p.i] == '0' {
		p.i++
	} else if p.digits() == 0 {
		return p.fail()
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return p.fail()
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		exp = true
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return p.fail()
		}
	}
	if p.lk != nil {
		p.lk.number(p.s[start:p.i], exp)
	}
	return true
}

// str skips a string starting at its opening quote; escaped reports whether it holds a backslash.
func (p *jsScanner) str() (escaped, ok bool) {
	p.i++ // opening quote
	for p.i < len(p.s) {
		// Most of a tool result is string bytes that need no attention: find the next quote and
		// check only the bytes before it.
		j := strings.IndexByte(p.s[p.i:], '"')
		if j < 0 {
			return false, p.fail()
		}
		seg := p.s[p.i : p.i+j]
		k := 0
		for k < len(seg) {
			// Eight bytes at a time while none of them is a control character or a backslash:
			// the common case for text, which then needs no per-byte look.
			for k+8 <= len(seg) && plain8(seg[k:k+8]) {
				k += 8
			}
			if k >= len(seg) {
				break
			}
			c := seg[k]
			if c < 0x20 {
				return false, p.fail()
			}
			if c != '\\' {
				k++
				continue
			}
			escaped = true
			if k+1 >= len(seg) {
				// The backslash escapes the quote found above: the string goes on after it.
				break
			}
			switch seg[k+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				k += 2
			case 'u':
				if k+6 > len(seg) || !isHex4(seg[k+2:k+6]) {
					return false, p.fail()
				}
				k += 6
			default:
				return false, p.fail()
			}
		}
		if k < len(seg) { // stopped at a backslash right before the quote: an escaped quote
			p.i += j + 1
			continue
		}
		p.i += j + 1 // past the closing quote
		return escaped, true
	}
	return false, p.fail()
}

// plain8 reports whether none of the 8 bytes of s is below 0x20 or a backslash. It reads them as
// one word: (x - 0x01…·n) & ^x & 0x80… is non-zero exactly when some byte of x is below n (n ≤ 0x80),
// and a byte equal to '\\' is a zero byte of x ^ 0x5c5c….
func plain8(s string) bool {
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	ctl := (x - ones*0x20) & ^x & highs
	y := x ^ (ones * '\\')
	bs := (y - ones) & ^y & highs
	return ctl|bs == 0
}

func isHex4(s string) bool {
	for i := 0; i < 4; i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// object scans an object starting at '{'. When visit is set it is called for every member in
// document order after the member's value was scanned.
func (p *jsScanner) object(depth int, visit func(m jsMember)) bool {
	return p.objectFn(depth, visit != nil, func(key string, keyStart int) bool {
		valStart := p.i
		if !p.value(depth) {
			return false
		}
		if visit != nil {
			visit(jsMember{key: key, start: keyStart, val: jsSpan{valStart, p.i}})
		}
		return true
	})
}

// objectFn scans an object starting at '{'. For every member it calls member with the key
// (decoded when decodeKeys is set, "" otherwise) and the offset of the key's opening quote, the
// scanner standing at the member's value; member scans the value (with p.value(depth) or its own
// finer reading of it) and reports its validity. The registry reads a search result this way in
// one pass.
func (p *jsScanner) objectFn(depth int, decodeKeys bool, member func(key string, keyStart int) bool) bool {
	if depth > maxJSONDepth {
		return p.fail()
	}
	p.i++ // '{'
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return true
	}
	// With a link collector, an object within its depth is one frame of it (duplicate keys).
	tracked := p.lk != nil && depth <= maxLinkDepth
	var frame jsLinkFrame
	if tracked {
		frame.base = len(p.lk.keys)
	}
	for {
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return p.fail()
		}
		keyStart := p.i
		escaped, ok := p.str()
		if !ok {
			return false
		}
		keyEnd := p.i
		var key string
		if decodeKeys {
			key = decodeString(p.s[keyStart+1:keyEnd-1], escaped)
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return p.fail()
		}
		p.i++
		p.ws()
		if p.i >= len(p.s) {
			return p.fail()
		}
		if !tracked {
			if !member(key, keyStart) {
				return p.fail()
			}
		} else {
			from := len(p.lk.cands)
			if !member(key, keyStart) {
				return p.fail()
			}
			if len(p.lk.keys) > frame.base || len(p.lk.cands) > from {
				if !decodeKeys {
					key = decodeString(p.s[keyStart+1:keyEnd-1], escaped)
				}
				p.lk.member(&frame, key, from)
			}
		}
		p.ws()
		if p.i >= len(p.s) {
			return p.fail()
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			p.ws()
		case '}':
			p.i++
			if tracked {
				p.lk.keys = p.lk.keys[:frame.base]
			}
			return true
		default:
			return p.fail()
		}
	}
}

// array scans an array starting at '['. When visit is set it is called with every element's span.
func (p *jsScanner) array(depth int, visit func(v jsSpan)) bool {
	return p.arrayFn(depth, func() bool {
		start := p.i
		if !p.value(depth) {
			return false
		}
		if visit != nil {
			visit(jsSpan{start, p.i})
		}
		return true
	})
}

// arrayFn scans an array starting at '['; elem is called at every element and scans it (see
// objectFn).
func (p *jsScanner) arrayFn(depth int, elem func() bool) bool {
	if depth > maxJSONDepth {
		return p.fail()
	}
	p.i++ // '['
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return true
	}
	for {
		if p.i >= len(p.s) || !elem() {
			return p.fail()
		}
		p.ws()
		if p.i >= len(p.s) {
			return p.fail()
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			p.ws()
		case ']':
			p.i++
			return true
		default:
			return p.fail()
		}
	}
}

// topObject scans s as one JSON object (surrounded by JSON whitespace only), calling visit for
// its members. It reports whether s is such a document.
// lk, when set, collects the document's link strings in the same pass.
func topObject(s string, lk *jsLinks, visit func(m jsMember)) bool {
	p := jsScanner{s: s, ok: true, lk: lk}
	return p.document(func() bool { return p.object(1, visit) })
}

// document scans p.s as one JSON object, read by obj (which starts at its '{'), surrounded by
// JSON whitespace only. A link collector learns how far the document was read (jsLinks.doc).
func (p *jsScanner) document(obj func() bool) bool {
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return false
	}
	if p.lk != nil {
		p.lk.doc = docStarted
	}
	if !obj() {
		return false
	}
	p.ws()
	if p.lk != nil && p.ok {
		p.lk.doc, p.lk.rest = docObject, p.i
	}
	return p.ok && p.i == len(p.s)
}

// stringValue decodes the JSON value at v of s when it is a string; ok is false for other types.
func stringValue(s string, v jsSpan) (string, bool) {
	if v.end-v.start < 2 || s[v.start] != '"' {
		return "", false
	}
	raw := s[v.start+1 : v.end-1]
	return decodeString(raw, strings.IndexByte(raw, '\\') >= 0), true
}

// decodeString decodes the body of a valid JSON string the way encoding/json does: escapes
// resolved, a lone surrogate and every invalid UTF-8 byte replaced by U+FFFD.
func decodeString(raw string, escaped bool) string {
	if !escaped && utf8.ValidString(raw) {
		return raw
	}
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			if c < utf8.RuneSelf {
				b.WriteByte(c)
				i++
				continue
			}
			r, size := utf8.DecodeRuneInString(raw[i:])
			b.WriteRune(r) // utf8.RuneError for an invalid byte, as encoding/json writes it
			i += size
			continue
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			b.WriteByte(raw[i+1])
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r := hex4(raw[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, hex4(raw[i+2:i+6])); dec != utf8.RuneError {
						b.WriteRune(dec)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			b.WriteRune(r)
			continue
		}
		i += 2
	}
	return b.String()
}

func hex4(s string) rune {
	v, _ := strconv.ParseUint(s, 16, 32) // validated by the scanner
	return rune(v)
}

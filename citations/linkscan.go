package citations

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// The link set reads a JSON tool result the way encoding/json decodes it into an `any` and a walk
// of that value down to maxLinkDepth finds its strings; the scanner of jsonscan.go does this in the
// pass it makes anyway (the registry's, or AddText's own), without building the value. What the
// decoded value would lose, the collector loses too: the value of a duplicate key that a later
// member of the same object replaces, and everything when the document is not valid JSON or holds
// a number that does not fit a float64 (encoding/json then returns an error). FuzzLinkSetReference
// checks it against the encoding/json reading.

// maxLinkDepth is how deep the link set looks into a JSON tool result: a string inside more than
// this many nested arrays and objects is not read (its URLs still count when the raw text shows
// them).
const maxLinkDepth = 64

// Where a document scan stopped, for the link collector (jsScanner.document).
const (
	docNone    = iota // no object was read: the text does not start with '{' after JSON whitespace
	docStarted        // an object was read and is invalid
	docObject         // an object was read and is valid; rest is the offset after it and its whitespace
)

// jsLinks collects the decoded JSON strings in which the link set looks for URLs.
type jsLinks struct {
	// cands are the decoded string values that may hold a URL the raw text does not show as it
	// stands (see str), in document order; a dropped one is "".
	cands []string
	// keys are, for every object being scanned, its members whose values gave candidates: the
	// decoded key and the range of cands the value gave. A frame's entries follow its base.
	keys []jsLinkKey
	// bad: a number of the document is out of float64's range, so encoding/json rejects it.
	bad  bool
	doc  int
	rest int
}

type jsLinkKey struct {
	key      string
	from, to int
}

// jsLinkFrame is one object's part of jsLinks.keys; index finds its keys once there are many.
type jsLinkFrame struct {
	base  int
	index map[string]int
}

// str notes the body raw of a string value (escaped: it holds a backslash). A string without an
// escape whose bytes are valid UTF-8 decodes to itself, and the raw text of the document holds it
// between quotes, which end a URL and let a "www." start one: the scan of the raw text finds in it
// exactly the URLs the decoded string holds, so it needs no second look. Other strings are
// decoded when they could hold "://" or "www." once decoded (an escape can make ':', '/' or '.',
// no other escape any of these characters or a 'w').
func (lk *jsLinks) str(raw string, escaped bool) {
	if !MayHoldBareURL(raw) {
		if !escaped || !strings.Contains(raw, `\/`) && !strings.Contains(raw, `\u`) {
			return
		}
	} else if !escaped && utf8.ValidString(raw) {
		return
	}
	if s := decodeString(raw, escaped); MayHoldBareURL(s) {
		lk.cands = append(lk.cands, s)
	}
}

// number notes a number token: encoding/json rejects a document whose number overflows a float64.
// Without an exponent, a token of at most 308 bytes is below 10^308 and fits.
func (lk *jsLinks) number(tok string, exp bool) {
	if lk.bad || !exp && len(tok) <= 308 {
		return
	}
	if _, err := strconv.ParseFloat(tok, 64); err != nil {
		lk.bad = true
	}
}

// member notes that a member of frame's object with the decoded key was scanned and that its
// value gave the candidates from len(cands)-... on (none when from == len(cands)). An earlier member
// with the same key loses its value, as in a decoded map: its candidates are dropped.
func (lk *jsLinks) member(f *jsLinkFrame, key string, from int) {
	to := len(lk.cands)
	i := -1
	if f.index != nil {
		if k, ok := f.index[key]; ok {
			i = k
		}
	} else {
		for k := f.base; k < len(lk.keys); k++ {
			if lk.keys[k].key == key {
				i = k
				break
			}
		}
	}
	if i >= 0 {
		old := &lk.keys[i]
		clear(lk.cands[old.from:old.to])
		old.from, old.to = from, to
		return
	}
	if to == from {
		return
	}
	lk.keys = append(lk.keys, jsLinkKey{key: key, from: from, to: to})
	switch n := len(lk.keys) - f.base; {
	case f.index != nil:
		f.index[key] = len(lk.keys) - 1
	case n > 16:
		// An object with many URL-bearing members: look its keys up in a map from now on.
		f.index = make(map[string]int, 2*n)
		for k := f.base; k < len(lk.keys); k++ {
			f.index[lk.keys[k].key] = k
		}
	}
}

// finish gives links the collected strings' URLs when the document content that the registry
// scanned is one JSON value as AddText reads it, or reads content with AddText's JSON reading when
// the registry's scan read no object (a top-level array, or a text starting with Unicode
// whitespace that is not JSON's). The URLs of content's raw text are the caller's.
func (lk *jsLinks) finish(links *LinkSet, content string) {
	switch lk.doc {
	case docNone:
		links.addJSON(content)
	case docObject:
		// AddText reads the text without its Unicode white space (strings.TrimSpace), where JSON
		// allows only four characters: what follows the object must be white space in that sense.
		if strings.TrimSpace(content[lk.rest:]) == "" {
			lk.addTo(links)
		}
	}
}

// addTo adds the URLs of the collected strings, unless the document is one encoding/json rejects.
func (lk *jsLinks) addTo(links *LinkSet) {
	if lk.bad {
		return
	}
	for _, s := range lk.cands {
		if s != "" {
			links.addURLsIn(s)
		}
	}
}

// addJSON adds the URLs of text's decoded JSON strings when text, without surrounding white space,
// is a JSON object or array.
func (s *LinkSet) addJSON(text string) {
	t := strings.TrimSpace(text)
	if t == "" || t[0] != '{' && t[0] != '[' {
		return
	}
	var lk jsLinks
	p := jsScanner{s: t, ok: true, lk: &lk}
	if p.value(0) && p.ok && p.i == len(t) {
		lk.addTo(s)
	}
}

package citations

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Tool names whose results may become sources. No other tool's output ever enters a registry.
const (
	ToolWebSearch   = "web_search"
	ToolOpenWebPage = "open_web_page"
)

// MaxSources caps a run's registry.
const MaxSources = 20

// ToolResult is one TOOL message of a run, in persisted order.
type ToolResult struct {
	Tool      string
	CallID    string
	MessageID uint64
	Content   string
	At        time.Time
}

// Source is one registry entry. N is its registry number (1-based), the number the model uses in
// [^N^]. Excerpt is the text the model was given for it.
type Source struct {
	N         int
	URL       string
	Title     string
	Tool      string
	CallID    string
	MessageID uint64
	Excerpt   string
	At        time.Time
}

// Registry is the ordered, deduplicated set of sources a run really retrieved. The zero value is an
// empty registry ready to use. It is not safe for concurrent use.
type Registry struct {
	// sources are looked up by URL with a linear scan: there are at most MaxSources of them, and
	// comparing twenty strings costs less than hashing into and growing a map.
	sources []Source
	// Overflow counts distinct sources that arrived after the cap.
	Overflow int
	// decoded has bit n-1 set when source n's excerpt came out of a JSON decode of a tool result,
	// which makes it valid UTF-8 (Verify's leads then skip the repair's validation pass).
	decoded uint32
}

// decoded holds one bit per source.
var _ [32 - MaxSources]struct{}

// excerptValid reports whether source n's excerpt is known to be valid UTF-8.
func (r *Registry) excerptValid(n int) bool { return r.decoded&(1<<(n-1)) != 0 }

// BuildRegistry builds the registry of a run from its tool results in persisted order.
func BuildRegistry(results []ToolResult) *Registry {
	r := &Registry{}
	for _, res := range results {
		r.Add(res)
	}
	return r
}

// Len is the number of sources.
func (r *Registry) Len() int { return len(r.sources) }

// Sources returns the entries in registry order. The slice must not be modified.
func (r *Registry) Sources() []Source { return r.sources }

// SetMessageID names the stored TOOL message of tool call callID on the sources it gave that do
// not name one yet. The agent enters a result before the store assigns the message's id, and calls
// this once the round is stored, so the citations it writes point at their message
// (Citation.MessageID) and a preview reads that one message by its id.
func (r *Registry) SetMessageID(callID string, id uint64) {
	for i := range r.sources {
		if s := &r.sources[i]; s.CallID == callID && s.MessageID == 0 {
			s.MessageID = id
		}
	}
}

// Lookup returns the source with registry number n.
func (r *Registry) Lookup(n int) (Source, bool) {
	if n < 1 || n > len(r.sources) {
		return Source{}, false
	}
	return r.sources[n-1], true
}

// Add parses one tool result (once), appends its new sources and returns the content to hand to the
// model: the same bytes with a "ref" number spliced into every source that has one (and a "ref" of
// its own taken out of every one that has none). Results of other tools, failure
// shapes, non-JSON and other shapes add nothing and come back unchanged. Adding an already annotated
// result gives the same numbers, so the hook can rebuild the registry from stored TOOL messages.
func (r *Registry) Add(res ToolResult) string {
	switch res.Tool {
	case ToolWebSearch:
		return r.addWebSearch(res, nil)
	case ToolOpenWebPage:
		return r.addOpenWebPage(res, nil)
	}
	return res.Content
}

// AddLinks is Add that also gives links what links.AddText(res.Content) adds (every URL in the
// result's text and in its decoded JSON strings), reading the result once for both: the registry's
// scan of a web_search or open_web_page result collects the strings the link set needs as it goes.
// A result the registry does not read (another tool, or a text that is not a JSON object) is read
// once by AddText. A nil links makes it Add.
func (r *Registry) AddLinks(res ToolResult, links *LinkSet) string {
	if links == nil {
		return r.Add(res)
	}
	var lk jsLinks
	var out string
	switch res.Tool {
	case ToolWebSearch:
		out = r.addWebSearch(res, &lk)
	case ToolOpenWebPage:
		out = r.addOpenWebPage(res, &lk)
	default:
		links.AddText(res.Content)
		return res.Content
	}
	links.addURLsIn(res.Content)
	lk.finish(links, res.Content)
	return out
}

// addWebSearch reads a web_search result in one pass (see jsonscan.go) and splices a "ref" into
// each result object that has a registry number. The pass validates the whole document and notes,
// for every object of "results", where its members are; sources are entered once the document is
// known to be valid and not a failure.
func (r *Registry) addWebSearch(res ToolResult, lk *jsLinks) string {
	content := res.Content
	var items []searchItem
	hasResults, isArray, failed := false, false, false
	p := jsScanner{s: content, ok: true, lk: lk}
	if !p.document(func() bool {
		return p.objectFn(1, true, func(key string, _ int) bool {
			switch key {
			case "error":
				failed = true
			case "results":
				// The last duplicate wins, as in encoding/json.
				hasResults, isArray, items = true, content[p.i] == '[', items[:0]
				if isArray {
					return p.arrayFn(2, func() bool { return p.searchItem(&items) })
				}
			}
			return p.value(1)
		})
	}) || failed || !hasResults || !isArray {
		return content
	}
	ed := make(edits, 0, len(items))
	for _, it := range items {
		if !it.object {
			continue
		}
		u, _ := stringValue(content, it.url)
		// Title and excerpt are decoded only for a source that enters the registry: a duplicate
		// or one past the cap needs neither.
		n := r.add(Source{URL: u, Tool: res.Tool, CallID: res.CallID, MessageID: res.MessageID, At: res.At}, &lazyText{content, it.title, it.excerpt})
		ed.setRef(content, it.span, it.refs, it.members, n)
	}
	return ed.apply(content)
}

// searchItem is where one element of a web_search result's "results" sits and, when it is an
// object, where its members are (the last of duplicates, as encoding/json reads them).
type searchItem struct {
	span                jsSpan
	object              bool
	url, title, excerpt jsSpan
	refs                []jsMember
	members             int
}

// searchItem scans one element of "results" (at depth 2), noting it in items.
func (p *jsScanner) searchItem(items *[]searchItem) bool {
	it := searchItem{span: jsSpan{start: p.i}}
	var ok bool
	if p.s[p.i] == '{' {
		it.object = true
		ok = p.objectFn(3, true, func(key string, keyStart int) bool {
			it.members++
			start := p.i
			if !p.value(3) {
				return false
			}
			v := jsSpan{start, p.i}
			switch key {
			case "url":
				it.url = v
			case "title":
				it.title = v
			case "content":
				it.excerpt = v
			case "ref":
				it.refs = append(it.refs, jsMember{key: key, start: keyStart, val: v})
			}
			return true
		})
	} else {
		ok = p.value(2)
	}
	it.span.end = p.i
	*items = append(*items, it)
	return ok
}

// addOpenWebPage reads an open_web_page result in one pass. It is a source only when its content is
// a string (truncated or not): null, a number or an object is not a page the model read.
func (r *Registry) addOpenWebPage(res ToolResult, lk *jsLinks) string {
	content := res.Content
	var u, title, excerpt string
	failed, isPage := false, false
	var refs []jsMember
	var members int
	var top jsSpan
	if !topObject(content, lk, func(m jsMember) {
		members++
		switch m.key {
		case "error":
			failed = true
		case "url":
			u, _ = stringValue(content, m.val)
		case "title":
			title, _ = stringValue(content, m.val)
		case "content":
			excerpt, isPage = stringValue(content, m.val)
		case "ref":
			refs = append(refs, m)
		}
	}) || failed || !isPage {
		return content
	}
	top.start = strings.IndexByte(content, '{')
	top.end = strings.LastIndexByte(content, '}') + 1
	before := len(r.sources)
	n := r.add(Source{URL: u, Title: title, Tool: res.Tool, CallID: res.CallID, MessageID: res.MessageID, Excerpt: excerpt, At: res.At}, nil)
	if len(r.sources) > before {
		r.decoded |= 1 << (n - 1) // the excerpt is stringValue's decode
	}
	var ed edits
	ed.setRef(content, top, refs, members, n)
	return ed.apply(content)
}

// edits are byte replacements in a text, in ascending order and not overlapping.
type edits []edit

// edit replaces at with with; an insertion of a "ref" member (the common case) is kept as its number
// and written by apply, so planning it allocates nothing.
type edit struct {
	at   jsSpan
	with string
	// ref > 0: insert `"ref":ref` (after a comma when comma is set) instead of with.
	ref   int
	comma bool
}

// setRef plans the splice that gives the object at obj the member "ref": n (no "ref" when n is 0).
// An object that already holds exactly that (an annotated result read again) is left as it is; one
// without "ref" gets it inserted before its closing brace; otherwise the object is rewritten from
// its members' own bytes without the old "ref"s. Nothing is decoded and encoded again.
func (ed *edits) setRef(s string, obj jsSpan, refs []jsMember, members, n int) {
	want := ""
	if n > 0 {
		want = strconv.Itoa(n)
	}
	switch {
	case len(refs) == 0 && n == 0:
		return
	case len(refs) == 1 && s[refs[0].val.start:refs[0].val.end] == want:
		return
	case len(refs) == 0:
		*ed = append(*ed, edit{at: jsSpan{obj.end - 1, obj.end - 1}, ref: n, comma: members > 0})
		return
	}
	// Rare: a "ref" the tool or a page put there, a wrong one, or several. Keep every other member's
	// bytes and append the right one.
	var b strings.Builder
	b.WriteByte('{')
	first := true
	p := jsScanner{s: s, i: obj.start, ok: true}
	p.object(1, func(m jsMember) {
		if m.key == "ref" {
			return
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(s[m.start:m.val.end])
	})
	if n > 0 {
		if !first {
			b.WriteByte(',')
		}
		b.WriteString(`"ref":` + want)
	}
	b.WriteByte('}')
	*ed = append(*ed, edit{at: obj, with: b.String()})
}

// apply returns s with the edits made (s itself when there are none).
func (ed edits) apply(s string) string {
	if len(ed) == 0 {
		return s
	}
	var b strings.Builder
	grow := len(s)
	for _, e := range ed {
		grow += len(e.with) + len(`,"ref":`) + 10
	}
	b.Grow(grow)
	var num [20]byte
	last := 0
	for _, e := range ed {
		b.WriteString(s[last:e.at.start])
		if e.ref > 0 {
			if e.comma {
				b.WriteByte(',')
			}
			b.WriteString(`"ref":`)
			b.Write(strconv.AppendInt(num[:0], int64(e.ref), 10))
		} else {
			b.WriteString(e.with)
		}
		last = e.at.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// lazyText is where a source's title and excerpt sit in its tool result, still encoded.
type lazyText struct {
	content        string
	title, excerpt jsSpan
}

// add enters s unless its URL is invalid, already in or past the cap, and returns its number (0:
// none). lazy, when set, holds the title and excerpt, decoded only for a source that enters.
func (r *Registry) add(s Source, lazy *lazyText) int {
	// A URL already in the registry was valid when it entered, and NormalizeURL only trims, so the
	// trimmed text is looked up before the URL is parsed again.
	if n := r.number(strings.TrimSpace(s.URL)); n > 0 {
		return n
	}
	u, ok := NormalizeURL(s.URL)
	if !ok {
		return 0
	}
	s.URL = u
	if len(r.sources) >= MaxSources {
		r.Overflow++
		return 0
	}
	if r.sources == nil {
		r.sources = make([]Source, 0, MaxSources)
	}
	s.N = len(r.sources) + 1
	if lazy != nil {
		s.Title, _ = stringValue(lazy.content, lazy.title)
		s.Excerpt, _ = stringValue(lazy.content, lazy.excerpt)
		r.decoded |= 1 << (s.N - 1)
	}
	s.Title = cleanTitle(s.Title)
	r.sources = append(r.sources, s)
	return s.N
}

// number is the registry number of the normalised URL u, 0 when it is not in the registry.
func (r *Registry) number(u string) int {
	for i := range r.sources {
		if r.sources[i].URL == u {
			return i + 1
		}
	}
	return 0
}

// NormalizeURL accepts only absolute http(s) URLs with a host and returns them trimmed.
func NormalizeURL(raw string) (string, bool) {
	s := strings.TrimSpace(raw)
	if s == "" || len(s) > 4096 {
		return "", false
	}
	if plainHTTPURL(s) {
		return s, true
	}
	return s, parsedHTTPURL(s)
}

// parsedHTTPURL is NormalizeURL's full check of a trimmed URL: net/url parses it, with an http(s)
// scheme and a host.
func parsedHTTPURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return false
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		return true
	}
	return false
}

// plainHTTPURL accepts, without allocating, the URLs search results are made of: "http://" or
// "https://" (any case), a host of letters, digits, dots and hyphens with an optional numeric port,
// then a path and query of URL characters with well-formed percent escapes and no fragment. Every
// such URL passes parsedHTTPURL (FuzzPlainHTTPURL); anything else is left to it.
func plainHTTPURL(s string) bool {
	var rest string
	switch {
	case len(s) > 7 && strings.EqualFold(s[:7], "http://"):
		rest = s[7:]
	case len(s) > 8 && strings.EqualFold(s[:8], "https://"):
		rest = s[8:]
	default:
		return false
	}
	i := 0
	for i < len(rest) && (isASCIILetter(rest[i]) || isDigit(rest[i]) || rest[i] == '.' || rest[i] == '-') {
		i++
	}
	if i == 0 {
		return false
	}
	if i < len(rest) && rest[i] == ':' {
		i++
		for i < len(rest) && isDigit(rest[i]) {
			i++
		}
	}
	if i < len(rest) && rest[i] != '/' && rest[i] != '?' {
		return false
	}
	for ; i < len(rest); i++ {
		c := rest[i]
		switch {
		case isASCIILetter(c) || isDigit(c) || strings.IndexByte("-._~!$&'()*+,;=:@/?", c) >= 0:
		case c == '%' && i+2 < len(rest) && isHexDigit(rest[i+1]) && isHexDigit(rest[i+2]):
			i += 2
		default:
			return false
		}
	}
	return true
}

func isHexDigit(c byte) bool {
	return isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'f'
}

// cleanTitle keeps titles to one line of reasonable length; HTML in titles stays text and is escaped
// by whoever renders it.
func cleanTitle(t string) string {
	t = collapseSpace(t)
	if len(t) > maxTitleRunes && utf8.RuneCountInString(t) > maxTitleRunes {
		if !utf8.ValidString(t) {
			// Titles come decoded from JSON and are valid UTF-8; the rune conversion would
			// repair other text, and does so here too.
			return string([]rune(t)[:maxTitleRunes])
		}
		t = t[:runeOffset(t, maxTitleRunes)]
	}
	return t
}

// maxTitleRunes bounds a source title.
const maxTitleRunes = 300

// Digest identifies an excerpt's text, so a later fetch can tell whether the source changed.
func Digest(excerpt string) string {
	// The hash reads the excerpt's bytes in place: Sum256 neither keeps nor modifies its argument,
	// and copying kilobytes of excerpt per citation only to hash them was most of the cost.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(excerpt), len(excerpt)))
	var b [len("sha256:") + 2*sha256.Size]byte
	copy(b[:], "sha256:")
	hex.Encode(b[len("sha256:"):], sum[:])
	return string(b[:])
}

package markdown

import (
	"html"
	"strings"

	"github.com/citegate/citegate/citations"
	xhtml "golang.org/x/net/html"
)

// hideTextURLs is the last line of the link rule on rendered HTML: every text node outside <code>
// and <pre>, and the title and alt attributes, pass through citations.FilterBareURLs, so text that
// reads as a URL only once rendered (an unwrapped link beside "://", an entity such as "&#58;") shows
// the notice instead. Tokens without a change are copied byte for byte.
func hideTextURLs(in string, allow func(string) bool) (string, int) {
	if !citations.MayHoldBareURL(in) && !strings.Contains(in, "&#") {
		return in, 0
	}
	// The tokens' raw texts follow each other through in, so a token is read as its span of in
	// (TagName lowercases the tokenizer's own buffer, not in), and the output is only built from
	// the first token that changes: an answer without a hidden URL comes back as it is.
	z := xhtml.NewTokenizer(strings.NewReader(in))
	var b strings.Builder
	changed := false
	pos, copied := 0, 0 // end of the current token in in; end of what b holds of in
	replace := func(start int, with string) {
		if !changed {
			b.Grow(len(in))
			changed = true
		}
		b.WriteString(in[copied:start])
		b.WriteString(with)
		copied = pos
	}
	hidden, code := 0, 0
	for {
		tt := z.Next()
		if tt == xhtml.ErrorToken {
			break
		}
		start := pos
		pos += len(z.Raw())
		raw := in[start:pos]
		switch tt {
		case xhtml.TextToken:
			if code == 0 {
				if out, n := citations.FilterBareURLs(html.UnescapeString(raw), allow); n > 0 {
					replace(start, html.EscapeString(out))
					hidden += n
				}
			}
		case xhtml.StartTagToken, xhtml.SelfClosingTagToken:
			name, more := z.TagName()
			if tt == xhtml.StartTagToken && (string(name) == "code" || string(name) == "pre") {
				code++
			}
			if !more || !(strings.Contains(raw, "title=") || strings.Contains(raw, "alt=")) {
				break
			}
			tok := xhtml.Token{Type: tt, Data: string(name)}
			attrChanged := false
			for more {
				var k, v []byte
				k, v, more = z.TagAttr()
				a := xhtml.Attribute{Key: string(k), Val: string(v)}
				if a.Key == "title" || a.Key == "alt" {
					if out, n := citations.FilterBareURLs(a.Val, allow); n > 0 {
						a.Val, attrChanged = out, true
						hidden += n
					}
				}
				tok.Attr = append(tok.Attr, a)
			}
			if attrChanged {
				replace(start, tok.String())
			}
		case xhtml.EndTagToken:
			if name, _ := z.TagName(); string(name) == "code" || string(name) == "pre" {
				code = max(0, code-1)
			}
		}
	}
	if !changed {
		return in[:pos], hidden
	}
	b.WriteString(in[copied:pos])
	return b.String(), hidden
}

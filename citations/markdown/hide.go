package markdown

import (
	"bytes"
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
	z := xhtml.NewTokenizer(strings.NewReader(in))
	var b strings.Builder
	b.Grow(len(in))
	hidden, code := 0, 0
	for {
		tt := z.Next()
		if tt == xhtml.ErrorToken {
			break
		}
		raw := append([]byte(nil), z.Raw()...)
		switch tt {
		case xhtml.TextToken:
			if code == 0 {
				text := html.UnescapeString(string(raw))
				if out, n := citations.FilterBareURLs(text, allow); n > 0 {
					b.WriteString(html.EscapeString(out))
					hidden += n
					continue
				}
			}
		case xhtml.StartTagToken, xhtml.SelfClosingTagToken:
			name, more := z.TagName()
			if tt == xhtml.StartTagToken && (string(name) == "code" || string(name) == "pre") {
				code++
			}
			if !more || !(bytes.Contains(raw, []byte("title=")) || bytes.Contains(raw, []byte("alt="))) {
				break
			}
			tok := xhtml.Token{Type: tt, Data: string(name)}
			changed := false
			for more {
				var k, v []byte
				k, v, more = z.TagAttr()
				a := xhtml.Attribute{Key: string(k), Val: string(v)}
				if a.Key == "title" || a.Key == "alt" {
					if out, n := citations.FilterBareURLs(a.Val, allow); n > 0 {
						a.Val, changed = out, true
						hidden += n
					}
				}
				tok.Attr = append(tok.Attr, a)
			}
			if changed {
				b.WriteString(tok.String())
				continue
			}
		case xhtml.EndTagToken:
			if name, _ := z.TagName(); string(name) == "code" || string(name) == "pre" {
				code = max(0, code-1)
			}
		}
		b.Write(raw)
	}
	return b.String(), hidden
}

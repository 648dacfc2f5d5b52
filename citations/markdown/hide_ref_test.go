package markdown

import (
	"bytes"
	"html"
	"strings"
	"testing"

	"github.com/citegate/citegate/citations"
	xhtml "golang.org/x/net/html"
)

// hideTextURLsReference is hideTextURLs as first written (every token copied, every text decoded),
// kept to check the one that copies only what changes against it.
func hideTextURLsReference(in string, allow func(string) bool) (string, int) {
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

// FuzzHideTextURLsReference: the same output and count as the token-by-token copy, for any HTML.
func FuzzHideTextURLsReference(f *testing.F) {
	for _, s := range []string{
		"<p>see https://evil.example/x and https://ok.example/a</p>", `<p title="https://evil.example/">t</p>`,
		"<pre><code>https://evil.example</code></pre>https&#58;//evil.example/", "<a href=x>&#34;q&#34;</a><img alt='www.evil.example'>",
		"<p>plain &#34;text&#34;</p>", "<p>unterminated <a", "<P TITLE=\"http://evil.example\">x</P>", "",
	} {
		f.Add(s)
	}
	allow := citations.AllowList([]string{"https://ok.example/a"})
	f.Fuzz(func(t *testing.T, in string) {
		got, gn := hideTextURLs(in, allow)
		want, wn := hideTextURLsReference(in, allow)
		if got != want || gn != wn {
			t.Fatalf("hideTextURLs(%q) = %q, %d; want %q, %d", in, got, gn, want, wn)
		}
	})
}

package tools

import (
	"bytes"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"codeberg.org/readeck/go-readability/v2/render"
	"golang.org/x/net/html"
	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding/simplifiedchinese"
)

// htmlText renders the visible text of an HTML node with block-level line breaks.
func htmlText(n *html.Node) string {
	return cleanText(render.InnerText(n))
}

var (
	spaceRun   = regexp.MustCompile(`[ \t\p{Zs}]+`)
	blankLines = regexp.MustCompile(`\n{3,}`)
)

// cleanText normalises whitespace: runs of spaces collapse, trailing spaces go, at most one blank
// line separates paragraphs, and the result is valid UTF-8.
func cleanText(s string) string {
	if isClean(s) {
		return s // search results from the corpus were cleaned when it was loaded
	}
	return cleanTextSteps(s)
}

// cleanTextSteps is cleanText done step by step, for text that needs it.
func cleanTextSteps(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(spaceRun.ReplaceAllString(l, " "))
	}
	s = strings.Join(lines, "\n")
	s = blankLines.ReplaceAllString(s, "\n\n")
	return strings.TrimSpace(s)
}

// isClean reports, in one pass and without a regular expression, that cleanText would return s
// unchanged: valid UTF-8 without carriage returns, tabs or space characters other than single
// ASCII spaces between words, no line beginning or ending in white space, no run of three line
// breaks, and no white space at either end. FuzzCleanText checks it against cleanText's own steps.
func isClean(s string) bool {
	if s == "" {
		return true
	}
	newlines := 0      // consecutive line breaks just seen
	prevSpace := false // the previous byte was an ASCII space
	lineStart := true  // at the start of a line
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\n':
				if prevSpace {
					return false // a line ending in a space
				}
				if newlines++; newlines >= 3 {
					return false
				}
				lineStart = true
			case c == ' ':
				if prevSpace || lineStart {
					return false
				}
				prevSpace = true
				i++
				continue
			case c == '\t' || c == '\r' || c == '\v' || c == '\f':
				return false
			default:
				newlines, lineStart = 0, false
			}
			prevSpace = false
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || unicode.IsSpace(r) || unicode.Is(unicode.Zs, r) {
			return false
		}
		newlines, lineStart, prevSpace = 0, false, false
		i += size
	}
	return !prevSpace && s[0] != '\n' && s[len(s)-1] != '\n'
}

// truncateRunes cuts s to at most max runes. It reports whether anything was cut.
func truncateRunes(s string, max int) (string, bool) {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s, false
	}
	i, n := 0, 0
	for i = range s {
		if n == max {
			break
		}
		n++
	}
	return s[:i], true
}

// toUTF8 converts a document body to UTF-8. The encoding comes from a byte-order mark, the
// Content-Type charset, an HTML <meta> declaration (for HTML), and otherwise a guess: bodies that
// are valid UTF-8 stay as they are, other bytes are tried as GB18030 (the usual legacy encoding of
// Chinese pages) and then as windows-1252. Whatever cannot be decoded becomes U+FFFD, so the
// result is always valid UTF-8.
func toUTF8(body []byte, contentType string, isHTML bool) string {
	if enc, name, certain := charset.DetermineEncoding(body, contentType); certain || (isHTML && declaresCharset(body)) {
		if name == "utf-8" {
			return strings.ToValidUTF8(string(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))), "\uFFFD")
		}
		if out, err := enc.NewDecoder().Bytes(body); err == nil {
			return strings.ToValidUTF8(string(out), "\uFFFD")
		}
	}
	if utf8.Valid(body) {
		return string(body)
	}
	if out, err := simplifiedchinese.GB18030.NewDecoder().Bytes(body); err == nil && utf8.Valid(out) && !bytes.Contains(out, []byte("\uFFFD")) {
		return string(out)
	}
	enc, _ := charset.Lookup("windows-1252")
	if out, err := enc.NewDecoder().Bytes(body); err == nil {
		return strings.ToValidUTF8(string(out), "\uFFFD")
	}
	return strings.ToValidUTF8(string(body), "\uFFFD")
}

var metaCharset = regexp.MustCompile(`(?i)<meta[^>]+charset\s*=`)

// declaresCharset reports whether the first KiB of an HTML document declares its encoding in a
// <meta> tag; charset.DetermineEncoding then found it by prescanning, though it calls that guess
// uncertain.
func declaresCharset(body []byte) bool {
	head := body
	if len(head) > 1024 {
		head = head[:1024]
	}
	return metaCharset.Match(head)
}

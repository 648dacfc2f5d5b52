package gateway

import (
	"github.com/citegate/citegate/citations"
)

// This file is the one place where answer text is made safe for a chat channel (DESIGN §3, §4):
// citation markers removed (Strip / the streaming Stripper) and the link rule applied (FilterLinks /
// the streaming LinkFilter) with the answer's allow set. Channel adapters send what they are given.

// safeFinal makes a whole text safe: citations.SafeText. It returns the text and how many links
// were hidden. allow nil allows no URL.
func safeFinal(text string, allow func(string) bool) (string, int) {
	return citations.SafeText(text, allowOrNone(allow))
}

// safeStream makes streamed answer text safe. For any split of a text into chunks, the
// concatenation of Push outputs and Flush equals safeFinal of the whole text, since each stage
// keeps that property (both are fuzz-tested in citations); it holds back only what could still
// become a marker or an unverified link.
type safeStream struct {
	strip citations.Stripper
	links *citations.LinkFilter
}

func newSafeStream(allow func(string) bool) *safeStream {
	return &safeStream{links: citations.NewLinkFilter(allowOrNone(allow))}
}

func (s *safeStream) Push(chunk string) string { return s.links.Push(s.strip.Push(chunk)) }

func (s *safeStream) Flush() string {
	rest := s.links.Push(s.strip.Flush())
	return rest + s.links.Flush()
}

// Hidden is the number of links hidden so far.
func (s *safeStream) Hidden() int { return s.links.Hidden() }

func allowOrNone(allow func(string) bool) func(string) bool {
	if allow == nil {
		return func(string) bool { return false }
	}
	return allow
}

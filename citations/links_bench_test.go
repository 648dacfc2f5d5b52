package citations

import (
	"strings"
	"testing"
)

// benchAnswers are the 5 KB answer of the Stripper benchmarks (markers, no URL) and the same
// answer with a verified bare URL, an unverified markdown link and inline code in every sentence.
var benchAnswers = map[string]string{
	"plain": strings.Repeat("电子发票抬头写错后，应先申请红冲原发票[^1^]，再按正确抬头重新开具。[^2^] ", 50),
	"links": strings.Repeat("红冲见 https://ok.example/a 与[官网](https://evil.example/x)，命令 `void --id 7`。[^2^] ", 42),
}

var benchAllow = AllowList([]string{"https://ok.example/a"})

func BenchmarkFilterLinks(b *testing.B) {
	for _, name := range []string{"plain", "links"} {
		text := benchAnswers[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				FilterLinks(text, benchAllow)
			}
		})
	}
}

func BenchmarkLinkFilterPush(b *testing.B) {
	for _, name := range []string{"plain", "links"} {
		text := benchAnswers[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				f := NewLinkFilter(benchAllow)
				for i := 0; i < len(text); i += 7 {
					f.Push(text[i:min(i+7, len(text))])
				}
				f.Flush()
			}
		})
	}
}

// BenchmarkStripperThenLinkFilter is the desktop stream: markers removed, then the link rule.
func BenchmarkStripperThenLinkFilter(b *testing.B) {
	for _, name := range []string{"plain", "links"} {
		text := benchAnswers[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				var s Stripper
				f := NewLinkFilter(benchAllow)
				for i := 0; i < len(text); i += 7 {
					f.Push(s.Push(text[i:min(i+7, len(text))]))
				}
				f.Push(s.Flush())
				f.Flush()
			}
		})
	}
}

func BenchmarkSafeText(b *testing.B) {
	text := benchAnswers["links"]
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		SafeText(text, benchAllow)
	}
}

func BenchmarkVerifyCodeSpans(b *testing.B) {
	text := benchAnswers["links"]
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		MarkersOutsideCode(text)
	}
}

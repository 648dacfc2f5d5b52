package citations

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// loopCPU runs f b.N times and reports the process CPU time per op (cpu-ns/op) beside the wall
// time: on a shared machine wall time measures the neighbours as much as the code.
func loopCPU(b *testing.B, f func()) {
	clock := func() time.Duration {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start, n := clock(), 0
	for b.Loop() {
		f()
		n++
	}
	b.ReportMetric(float64(clock()-start)/float64(n), "cpu-ns/op")
}

// BenchmarkStripperBaseline is the marker Stripper and Strip on the same answers, in the same run
// as the link-rule benchmarks below.
func BenchmarkStripperBaseline(b *testing.B) {
	for _, name := range []string{"plain", "links"} {
		text := benchAnswers[name]
		b.Run("push/"+name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			loopCPU(b, func() {
				var s Stripper
				for i := 0; i < len(text); i += 7 {
					s.Push(text[i:min(i+7, len(text))])
				}
				s.Flush()
			})
		})
		b.Run("strip/"+name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			loopCPU(b, func() { Strip(text) })
		})
	}
}

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
			loopCPU(b, func() { FilterLinks(text, benchAllow) })
		})
	}
}

func BenchmarkLinkFilterPush(b *testing.B) {
	for _, name := range []string{"plain", "links"} {
		text := benchAnswers[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			loopCPU(b, func() {
				f := NewLinkFilter(benchAllow)
				for i := 0; i < len(text); i += 7 {
					f.Push(text[i:min(i+7, len(text))])
				}
				f.Flush()
			})
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
			loopCPU(b, func() {
				var s Stripper
				f := NewLinkFilter(benchAllow)
				for i := 0; i < len(text); i += 7 {
					f.Push(s.Push(text[i:min(i+7, len(text))]))
				}
				f.Push(s.Flush())
				f.Flush()
			})
		})
	}
}

func BenchmarkSafeText(b *testing.B) {
	text := benchAnswers["links"]
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	loopCPU(b, func() { SafeText(text, benchAllow) })
}

func BenchmarkVerifyCodeSpans(b *testing.B) {
	text := benchAnswers["links"]
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	loopCPU(b, func() { MarkersOutsideCode(text) })
}

package markdown

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/citegate/citegate/citations"
	"github.com/yuin/goldmark/parser"
)

// pathological is the stored answer of issue 7 point 9: 64 KiB of "_a**" (emphasis delimiters that
// never match the way goldmark's delimiter processing hopes).
var pathological = strings.Repeat("_a**", 64<<10/4)

// BenchmarkRenderPathological compares Render (bounded) with the unbounded path it had before:
// goldmark with emphasis parsing on whatever the input.
func BenchmarkRenderPathological(b *testing.B) {
	b.Run("bounded", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(pathological)))
		loopCPU(b, func() { _ = Render(pathological, nil, Options{Anchor: "m1"}) })
	})
	b.Run("unbounded", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(pathological)))
		loopCPU(b, func() {
			pc := parser.NewContext()
			pc.Set(stateKey, &renderState{anchor: "m1"})
			var buf bytes.Buffer
			if err := md.Convert([]byte(pathological), &buf, parser.WithContext(pc)); err != nil {
				b.Fatal(err)
			}
			_ = policy.Sanitize(buf.String())
		})
	})
}

// normalAnswer is an ordinary ~8 KiB answer: headings, lists, emphasis, code, links and markers.
func normalAnswer() string {
	unit := "## 红字发票\n\n开具红字发票前，需要**先确认**购买方是否已经*抵扣*[^1^]。流程见 [指南](https://kb.example.com/invoice/void) 与 https://www.chinatax.gov.cn/red-invoice?id=7 [^2^]。\n\n" +
		"- 第一步：在系统中填写 `红字信息表`；\n- 第二步：等待 _购买方_ 确认[^1^]；\n- 第三步：开具红字发票。\n\n```\ninvoice void --id 42\n```\n\n"
	return strings.Repeat(unit, 8<<10/len(unit)+1)
}

func BenchmarkRenderNormal8K(b *testing.B) {
	content := normalAnswer()
	cits := []citations.Citation{cite(1, "https://kb.example.com/invoice/void", "发票作废与重开"), cite(2, "https://www.chinatax.gov.cn/red-invoice?id=7", "红字发票开具流程")}
	b.ReportAllocs()
	b.SetBytes(int64(len(content)))
	loopCPU(b, func() { _ = Render(content, cits, Options{Anchor: "m1", MessageID: 1}) })
}

// cpuClock reports the process's user+system CPU time. Benchmarks report it per op next to the
// wall-clock ns/op, because on a shared machine wall time measures the neighbours as much as the
// code.
func cpuClock() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopCPU runs f b.N times and reports cpu-ns/op.
func loopCPU(b *testing.B, f func()) {
	start := cpuClock()
	n := 0
	for b.Loop() {
		f()
		n++
	}
	b.ReportMetric(float64(cpuClock()-start)/float64(n), "cpu-ns/op")
}

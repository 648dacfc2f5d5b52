package markdown

import (
	"bytes"
	"slices"
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

// codeAnswer is an answer with n fenced Go blocks of about size bytes each, between paragraphs.
func codeAnswer(n, size int) string {
	line := "\tif err := run(ctx, cfg.Addr); err != nil { return fmt.Errorf(\"serve: %w\", err) } // [^1^]\n"
	block := "```go\n" + strings.Repeat(line, max(1, size/len(line))) + "```\n\n"
	var b strings.Builder
	for range n {
		b.WriteString("下面的代码启动服务[^1^]：\n\n" + block)
	}
	return b.String()
}

// BenchmarkRenderCode compares an answer with code rendered with highlighting (default) and
// without (PlainCode, what Render did before highlighting), in the same run: a typical answer
// (two 1 KiB blocks) and one at the budget (16 KiB of code in four blocks, all highlighted) and
// over it (64 KiB: the rest is plain).
func BenchmarkRenderCode(b *testing.B) {
	cits := []citations.Citation{cite(1, "https://go.dev/doc", "Go")}
	for _, c := range []struct {
		name    string
		n, size int
	}{{"2x1KiB", 2, 1 << 10}, {"4x4KiB", 4, 4 << 10}, {"16x4KiB", 16, 4 << 10}} {
		content := codeAnswer(c.n, c.size)
		for _, plain := range []bool{false, true} {
			name := c.name + "/highlighted"
			if plain {
				name = c.name + "/plain"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(content)))
				loopCPU(b, func() { _ = Render(content, cits, Options{Anchor: "m1", MessageID: 1, PlainCode: plain}) })
			})
		}
	}
}

// adversarialCode are inputs meant to make a regular-expression lexer backtrack or emit one token
// per byte; each is cut to maxHighlightBlock.
var adversarialCode = map[string]string{
	"quotes":   `"\'` + "`",
	"comments": `/*/*//`,
	"markup":   `<a<!--<![CDATA[`,
	"brackets": `[{(`,
	"newlines": "a\n",
	"interp":   "#{${`",
	"numbers":  "0x1e9.e-",
	"heredoc":  "<<EOF\nx EOF\n",
	"words":    "aaaa ",
}

// BenchmarkHighlightWorstCase highlights maxHighlightBlock bytes of each adversarial input with
// each allowed lexer and reports the slowest combination's CPU time per block.
func BenchmarkHighlightWorstCase(b *testing.B) {
	names := make([]string, 0, len(highlightLanguages))
	for lang := range highlightLanguages {
		names = append(names, lang)
	}
	slices.Sort(names)
	b.ReportAllocs()
	var worst time.Duration
	var worstName string
	for b.Loop() {
		for _, lang := range names {
			for kind, unit := range adversarialCode {
				code := strings.Repeat(unit, maxHighlightBlock/len(unit))
				start := cpuClock()
				_, _, _ = highlight(lexerAlias(lang), code, nil)
				d := cpuClock() - start
				if d > worst {
					worst, worstName = d, lang+"/"+kind
				}
				if d > 50*time.Millisecond {
					b.Logf("%s/%s: %v CPU", lang, kind, d)
				}
			}
		}
	}
	b.ReportMetric(float64(worst), "worst-cpu-ns/block")
	b.Logf("slowest: %s (%v CPU for %d bytes)", worstName, worst, maxHighlightBlock)
}

// lexerAlias maps a canonical lexer name to a name lexers.Get resolves.
func lexerAlias(name string) string {
	switch name {
	case "Bash Session":
		return "console"
	case "Docker":
		return "dockerfile"
	case "Protocol Buffer":
		return "protobuf"
	case "Nginx configuration file":
		return "nginx"
	}
	return strings.ToLower(name)
}

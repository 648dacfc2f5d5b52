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

// offlineAnswer is the answer the offline (extractive) model gives in the whole-gateway load test
// (cmd/citegate-load), with its one citation: what the websocket renders on every turn.
const offlineAnswer = "根据检索到的资料：\n\n联系开票方：把原发票（PDF 或 OFD 文件）和正确的开票信息发给销售方的开票联系人，说明需要红冲重开。[^1^]\n确认红字信息：如果原发票是增值税专用发票，且我方已经在税务平台勾选用于抵扣，需要由我方财务先在电子发票服务平台确认《红字发票信息确认单》，请把原发票号码发邮件到 fssc@example.com，财务共享中心在 2 个工作日内完成确认。[^1^]\n未勾选抵扣的发票或普通发票，由销售方直接发起红冲即可。[^1^]\n销售方开具红字发票：销售方开具红字发票冲销原发票，并把红字发票发给我们留存。[^1^]\n按正确抬头重新开具：销售方按上表信息重新开具蓝字发票。[^1^]\n收到后请核对名称、纳税人识别号、金额和开票日期。[^1^]\n提交报销：在费控系统中上传新发票，并在备注栏写明“原发票号码 XXXXXXXX 已红冲”。[^1^]"

func offlineCitations() []citations.Citation {
	at := time.Date(2026, 12, 1, 11, 23, 8, 0, time.UTC)
	return []citations.Citation{{N: 1, URL: "http://127.0.0.1:18471/kb/einvoice-title-correction", Title: "电子发票抬头开错了怎么办", RetrievedAt: &at,
		Lead: "公司正确的开票信息\n抬头必须与“云杉科技有限公司”完全一致，不能写成简称（如“云杉科技”）或英文名。增值税普通发票至少要有名称和纳税人识别号两项正确；增值税专用发票要求以上四项全部正确。\n操作步骤…"}}
}

// BenchmarkRenderOfflineAnswer renders the offline model's answer the ways a turn does: without
// citations (answer.final), with them (the citations frame: body and sources), and the sources
// section alone.
func BenchmarkRenderOfflineAnswer(b *testing.B) {
	cits := offlineCitations()
	opt := Options{Anchor: "m4", MessageID: 4, AllowLink: citations.AllowList([]string{cits[0].URL})}
	b.Run("final", func(b *testing.B) {
		b.ReportAllocs()
		loopCPU(b, func() { _ = RenderAnswer(offlineAnswer, nil, opt) })
	})
	b.Run("cited", func(b *testing.B) {
		b.ReportAllocs()
		loopCPU(b, func() { _ = RenderAnswer(offlineAnswer, cits, opt) })
	})
	b.Run("sources", func(b *testing.B) {
		b.ReportAllocs()
		loopCPU(b, func() { _ = RenderSources(cits, opt) })
	})
}

package extractive

import (
	"context"
	"testing"
)

// benchPassages are three search results as the bundled corpus returns them (500-rune passages).
var benchPassages = []passage{
	{ref: 1, order: 0, title: "费用报销流程", content: "## 报销时限\n- 费用应在发生后 60 天内 提交报销；超过 60 天的，需部门负责人书面说明原因，超过 180 天的不予报销。\n- 每年 12 月 20 日为年度报销截止日，当年发生的费用请在此之前提交，以便财务完成年度结账。\n## 提交步骤\n1. 登录费控系统，选择报销类型（差旅报销、日常报销、招待报销）。\n2. 填写费用明细，逐笔上传发票。电子发票请上传原始 PDF、OFD 或 XML 文件，系统会自动验真和查重。\n3. 关联出差申请或招待申请（差旅和招待报销必须关联事前申请）。\n4. 提交后按审批链流转：直属上级 → 部门负责人（单笔 5,000 元以上）→ 财务审核 → 出纳付款。\n5. 纸质发票和纸质单据需打印报销单封面，连同票据放入单据袋，投递到各办公区的财务收单箱。\n## 付款时间\n财务审核通过后 5 个工作日内 打款到员工工资卡。可在费控系统“我的报销”中查看进度，被退回的单据会在系统内写明原因。\n## 发票要求\n- 发票抬头必须为“云杉科技有限公司”，并填写正确的纳税人识别号。抬头错误的发票需先红冲再重开，不能直接报销。"},
	{ref: 2, order: 1, title: "国内差旅标准", content: "## 住宿标准（每间每晚上限）\n| 城市类别 | 普通员工 | 经理及以上 |\n| --- | --- | --- |\n| 一类：北京、上海、广州、深圳 | 600 元 | 800 元 |\n| 二类：省会城市、计划单列市 | 450 元 | 600 元 |\n| 三类：其他城市 | 350 元 | 450 元 |\n同性别员工同行出差的原则上两人一间。超标部分由个人承担，特殊情况（如展会期间酒店涨价）需事先在出差申请中说明并由部门负责人批准。\n## 出差补贴\n- 伙食补贴：每天 100 元，按出差自然天数计算，无需发票。\n- 客户或会议已安排餐食的，当天伙食补贴减半。\n- 出差补贴随差旅报销单一并发放。\n## 报销\n出差结束后 60 天内在费控系统提交差旅报销，关联出差申请。住宿须取得抬头为“云杉科技有限公司”的发票，酒店能开专票的请开增值税专用发票。"},
	{ref: 3, order: 2, title: "电子发票抬头开错了怎么办", content: "## 已经报销或入账的情况\n如果抬头错误的发票已经提交报销，请先在费控系统中撤回报销单；已付款的，由财务共享中心联系你办理冲账，拿到新发票后重新提交。不要把原发票和新发票同时报销，系统会按发票号码查重，重复报销会被退回并通报。\n## 时限与注意事项\n- 请在发现错误后尽快处理。跨月、跨年度的红冲需要销售方配合，时间越久越难办。\n- 个人抬头（写成个人姓名）的发票不能用于公司报销，同样需要红冲后重开。"},
}

// BenchmarkExtractiveCompose measures the extractive model's own cost for one answer: reading the
// question, splitting and scoring the sentences of three search results, writing the answer.
// "cold" analyses every passage afresh (a search result never seen before); "memo" finds the
// passages' analyses in the model's memo, as a repeated search result does.
func BenchmarkExtractiveCompose(b *testing.B) {
	for _, q := range []string{"报销多久能到账？", "那差旅报销需要哪些材料？多久能到账？"} {
		b.Run(q+"/cold", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if compose(q, true, benchPassages, nil) == "" {
					b.Fatal("empty answer")
				}
			}
		})
		b.Run(q+"/memo", func(b *testing.B) {
			memo := newAnalysisMemo(memoEntries)
			b.ReportAllocs()
			for b.Loop() {
				if composeMemo(memo, q, true, benchPassages, nil) == "" {
					b.Fatal("empty answer")
				}
			}
		})
	}
}

// BenchmarkStreamText measures handing an answer out in deltas.
func BenchmarkStreamText(b *testing.B) {
	text := compose("那差旅报销需要哪些材料？多久能到账？", true, benchPassages, nil)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = 0
		if _, err := streamText(context.Background(), text, func(string) { n++ }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "deltas/answer")
}

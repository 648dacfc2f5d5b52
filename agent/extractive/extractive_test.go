package extractive

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/internal/textseg"
)

func TestSplitSentences(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"先申请红冲。再重新开具！可以吗？", []string{"先申请红冲。", "再重新开具！", "可以吗？"}},
		{"## 处理原则\n- **红冲**是指开具负数发票；原发票失效", []string{"红冲是指开具负数发票；", "原发票失效"}},
		{"处理原则\n满 1 年不满 10 年 5 天", []string{"满 1 年不满 10 年 5 天"}},
		{"Reset it first. Then log in again! Version 1.2 works", []string{"Reset it first.", "Then log in again!", "Version 1.2 works"}},
		// A table row becomes one sentence naming its columns; the header itself states nothing.
		{"| 项目 | 内容 |\n| --- | --- |\n| 名称（抬头） | 云杉科技有限公司 |", []string{"名称（抬头）：云杉科技有限公司。"}},
		{"## 住宿标准\n| 城市类别 | 普通员工 | 经理及以上 |\n| --- | --- | --- |\n| 一类：北京 | 600 元 | 800 元 |\n| 三类：其他城市 | 350 元 | 450 元 |",
			[]string{"住宿标准：一类：北京，普通员工 600 元，经理及以上 800 元。", "住宿标准：三类：其他城市，普通员工 350 元，经理及以上 450 元。"}},
		{"## Troubleshooting\n| Symptom | What to do |\n| --- | --- |\n| No MFA prompt | Refresh the app. |\n| Pipe \\| cell | Escape it. |",
			[]string{"Troubleshooting: No MFA prompt: Refresh the app.", "Troubleshooting: Pipe | cell: Escape it."}},
		{"| Level | Examples | Rules |\n| --- | --- | --- |\n| Public | Press releases | May be shared freely. |",
			[]string{"Public — Examples: Press releases; Rules: May be shared freely."}},
		// Rows without a header (the passage began below it) keep their cells.
		{"| 满 20 年 | 15 天 |", []string{"满 20 年，15 天。"}},
		{"| Berlin | 120 EUR | 90 EUR |", []string{"Berlin — 120 EUR; 90 EUR."}},
		{"## 出差补贴\n- 伙食补贴：每天 100 元。\n\n2. 第二步，提交申请", []string{"伙食补贴：每天 100 元。", "第二步，提交申请"}},
		{"1. 联系开票方说明情况。\n短", []string{"联系开票方说明情况。"}},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, splitSentences(tc.in), tc.in)
	}
}

func TestCompose(t *testing.T) {
	invoice := passage{ref: 1, content: "已经开具的电子发票不能直接修改。抬头写错时，唯一正确的做法是：先申请红冲原发票，再按正确抬头重新开具。"}
	leave := passage{ref: 2, order: 1, content: "员工入职满一年后每年享有 5 天带薪年假。"}
	tests := []struct {
		name     string
		question string
		ps       []passage
		errs     []string
		want     string
	}{
		{
			name: "best sentences cited", question: "电子发票抬头写错了怎么办？", ps: []passage{invoice, leave},
			// Picked by score, written in source order.
			want: "根据检索到的资料：\n\n已经开具的电子发票不能直接修改。[^1^]\n抬头写错时，唯一正确的做法是：先申请红冲原发票，再按正确抬头重新开具。[^1^]",
		},
		{
			name: "meta sentences and questions give way", question: "电子发票抬头写错了怎么办？",
			ps:   []passage{{ref: 4, content: "本文说明电子发票抬头写错时的处理办法。\n抬头写错了怎么办？\n抬头写错时应先红冲原发票。"}},
			want: "根据检索到的资料：\n\n抬头写错时应先红冲原发票。[^4^]",
		},
		{
			name: "table rows answer an amount question", question: "差旅住宿标准是多少",
			ps:   []passage{{ref: 1, title: "国内差旅标准", content: "本标准适用于员工因公在国内出差期间的交通、住宿和补贴。\n## 住宿标准（每间每晚上限）\n| 城市类别 | 普通员工 | 经理及以上 |\n| --- | --- | --- |\n| 一类：北京、上海 | 600 元 | 800 元 |\n| 三类：其他城市 | 350 元 | 450 元 |\n同性别员工同行出差的原则上两人一间。"}},
			want: "根据检索到的资料：\n\n住宿标准（每间每晚上限）：一类：北京、上海，普通员工 600 元，经理及以上 800 元。[^1^]\n住宿标准（每间每晚上限）：三类：其他城市，普通员工 350 元，经理及以上 450 元。[^1^]",
		},
		{
			name: "figures in the unit asked for win", question: "年假有几天？",
			ps:   []passage{{ref: 2, title: "年假规定", content: "公司为员工安排带薪年假。\n## 年假天数\n| 累计工作年限 | 法定年假 |\n| --- | --- |\n| 满 1 年不满 10 年 | 5 天 |\n年假申请至少提前 3 个工作日。"}},
			want: "根据检索到的资料：\n\n年假天数：满 1 年不满 10 年，法定年假 5 天。[^2^]",
		},
		{
			name: "steps answer a how-question, the whole procedure", question: "How do I reset my password?",
			ps:   []passage{{ref: 5, title: "Password Guide", content: "Passwords expire every 90 days.\n## Reset your password\n1. Open the password portal.\n2. Enter the code from the text message.\n3. Choose a new password.\nCall IT if you are stuck."}},
			want: "Based on the retrieved sources:\n\nOpen the password portal.[^5^]\nEnter the code from the text message.[^5^]\nChoose a new password.[^5^]",
		},
		{
			name: "each sentence cites its own source", question: "出差伙食补贴多少钱",
			ps: []passage{
				{ref: 3, title: "费用报销流程", content: "差旅报销须关联出差申请。\n出差补贴随差旅报销单一并发放，伙食补贴不另行申请。"},
				{ref: 7, order: 1, title: "国内差旅标准", content: "## 出差补贴\n- 伙食补贴：每天 100 元，无需发票。\n- 客户已安排餐食的，当天伙食补贴减半。"},
			},
			// The amount question keeps the sentence with the amount, from the source that states it.
			want: "根据检索到的资料：\n\n伙食补贴：每天 100 元，无需发票。[^7^]",
		},
		{
			name: "two sources, each cited for its own sentence", question: "抬头写错的发票要红冲吗",
			ps: []passage{
				{ref: 3, title: "费用报销流程", content: "## 发票要求\n- 抬头写错的发票需先红冲再重开，不能直接报销。\n- 同一张发票只能报销一次。"},
				{ref: 7, title: "电子发票抬头开错了怎么办", content: "抬头写错的发票，先申请红冲原发票，再按正确抬头重新开具。\n如有疑问，请联系财务共享中心。"},
			},
			want: "根据检索到的资料：\n\n抬头写错的发票需先红冲再重开，不能直接报销。[^3^]\n抬头写错的发票，先申请红冲原发票，再按正确抬头重新开具。[^7^]",
		},
		{
			// A sentence of another document that shares only part of what the best one names
			// ("发票" without "写错") does not join the answer.
			name: "a second source that merely shares a word stays out", question: "抬头写错的发票要红冲吗",
			ps: []passage{
				{ref: 3, title: "费用报销流程", content: "## 发票要求\n- 抬头写错的发票需先红冲再重开，不能直接报销。"},
				{ref: 7, title: "发票种类", content: "专票开错后必须红冲后重开。"},
			},
			want: "根据检索到的资料：\n\n抬头写错的发票需先红冲再重开，不能直接报销。[^3^]",
		},
		{
			name: "nothing relevant", question: "火星探测器用什么推进剂？", ps: []passage{invoice, leave},
			want: "没有在检索到的资料中找到与该问题直接相关的内容。",
		},
		{
			name: "search failed", question: "年假有几天？", errs: []string{"搜索服务超时（20s）"},
			want: "检索失败：搜索服务超时（20s）。暂时无法根据资料回答这个问题。",
		},
		{
			name: "english", question: "How many days of annual leave?", ps: []passage{{ref: 3, content: "Employees get 5 days of annual leave. Parking is free."}},
			want: "Based on the retrieved sources:\n\nEmployees get 5 days of annual leave.[^3^]",
		},
		{
			name: "no results", question: "How many days of annual leave?",
			want: "I could not find anything directly relevant to this question in the retrieved sources.",
		},
	}
	// One memo serves every case twice: an analysis made for one question (cold) and found again
	// for another (warm) answers exactly as a fresh one does.
	memo := newAnalysisMemo(memoEntries)
	for round := range 2 {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				assert.Equal(t, tc.want, compose(tc.question, textseg.HasHan(tc.question), tc.ps, tc.errs))
				assert.Equal(t, tc.want, composeMemo(memo, tc.question, textseg.HasHan(tc.question), tc.ps, tc.errs), "memo, round %d", round)
			})
		}
	}
	assert.Positive(t, memo.hits.Load())
	assert.Positive(t, memo.misses.Load())
}

func TestQuantityWanted(t *testing.T) {
	tests := []struct {
		q      string
		number bool
		units  []string
	}{
		{"年假有几天？", true, []string{"天"}},
		{"出差伙食补贴多少钱", true, []string{"元"}},
		{"差旅住宿标准是多少", true, nil},
		{"审批要几个工作日", true, []string{"工作日"}},
		{"How many days of leave do I get?", true, []string{"day"}},
		{"How much is the meal allowance?", true, nil},
		{"电子发票抬头写错了怎么办？", false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.q, func(t *testing.T) {
			got := quantityWanted(tc.q)
			assert.Equal(t, tc.number, got.number)
			assert.Equal(t, tc.units, got.units)
		})
	}
	num, unit := quantityWanted("年假有几天？").match("满 10 年，法定年假 10 天")
	assert.True(t, num)
	assert.True(t, unit)
	num, unit = quantityWanted("年假有几天？").match("至少提前 3 个工作日")
	assert.True(t, num)
	assert.False(t, unit)
}

func TestParseSearchResult(t *testing.T) {
	ps, msg := parseSearchResult(`{"query":"q","results":[{"title":"A","url":"https://a.example/","content":"x","ref":2},{"title":"B","url":"https://b.example/","content":"y"}],"total_results":2}`)
	assert.Empty(t, msg)
	require.Len(t, ps, 1, "a result without ref cannot be cited")
	assert.Equal(t, 2, ps[0].ref)
	_, msg = parseSearchResult(`{"error":"provider returned 500"}`)
	assert.Equal(t, "provider returned 500", msg)
	_, msg = parseSearchResult(`not json`)
	assert.NotEmpty(t, msg)

	// The memo's reading is parseSearchResult's, found again for the same text.
	memo := newAnalysisMemo(memoEntries)
	for _, content := range []string{
		`{"query":"q","results":[{"title":"A","url":"https://a.example/","content":"x","ref":2},{"title":"B","url":"https://b.example/","content":"y","ref":3}],"total_results":2}`,
		`{"error":"provider returned 500"}`, `not json`, `{"results":[]}`,
	} {
		wantPs, wantMsg := parseSearchResult(content)
		for range 2 {
			ps, msg := memo.searchResult(content)
			assert.Equal(t, wantPs, ps, content)
			assert.Equal(t, wantMsg, msg, content)
		}
	}
	assert.Equal(t, 4, memo.results.Len())
}

// TestQuestionMemo: the memo's reading of a question is the fresh one, and a caller changing its
// copy of the question does not change what the memo hands out next.
func TestQuestionMemo(t *testing.T) {
	memo := newAnalysisMemo(memoEntries)
	for _, text := range []string{"年假有几天？没休完的可以顺延吗？", "那差旅报销需要哪些材料？多久能到账？", "How do I reset my password?", "请列出要点"} {
		want := analyseQuestion(text)
		got := memo.question(text)
		assert.Equal(t, want, got, text)
		q := got.q
		q.zh = !q.zh
		again := memo.question(text)
		assert.Same(t, got, again, text)
		assert.Equal(t, want, again, text)
	}
}

func TestParseQuestion(t *testing.T) {
	tests := []struct {
		q      string
		asks   []string
		topics []string
		list   bool
	}{
		{"年假有几天？", []string{"年假有几天"}, []string{""}, false},
		// A later part borrows the first part's topic.
		{"密码多久过期？忘了怎么办？", []string{"密码多久过期", "忘了怎么办"}, []string{"", "密码"}, false},
		{"那差旅报销需要哪些材料？多久能到账？", []string{"那差旅报销需要哪些材料", "多久能到账"}, []string{"", "差旅报销"}, true},
		// A comma splits only between two clauses that both ask.
		{"住宿标准是多少，伙食补贴呢？", []string{"住宿标准是多少", "伙食补贴呢"}, []string{"", "住宿标准"}, false},
		{"我想问一下，年假有几天？", []string{"我想问一下，年假有几天"}, []string{""}, false},
		// An instruction is no part; it makes the question a list question.
		{"报销和发票有哪些规定？请列出要点", []string{"报销和发票有哪些规定"}, []string{""}, true},
		{"What are the data classification levels? List them.", []string{"What are the data classification levels"}, []string{""}, true},
		{"How long does a VPN session last, and how many devices can connect at once?", []string{"How long does a VPN session last", "how many devices can connect at once"}, []string{"", "VPN session last"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.q, func(t *testing.T) {
			q := parseQuestion(tc.q)
			var asks, topics []string
			for _, p := range q.parts {
				asks = append(asks, p.ask)
				topics = append(topics, p.topic)
				if tc.list {
					assert.True(t, q.parts[0].list, "the first part asks for a list")
				} else {
					assert.False(t, p.list)
				}
			}
			assert.Equal(t, tc.asks, asks)
			assert.Equal(t, tc.topics, topics)
		})
	}
	// The search query carries the lexicon's synonyms, so a paraphrase finds the document.
	assert.Contains(t, parseQuestion("密码忘了怎么办？").parts[0].query, "忘记")
	assert.Contains(t, parseQuestion("How do I book a meeting room?").parts[0].query, "会议室")
}

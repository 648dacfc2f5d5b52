package textseg

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Lexicon groups phrases that mean the same thing to a reader of the knowledge base: everyday
// paraphrases ("密码忘了" for "忘记密码", "到账" for "打款"), the abbreviations the documents define
// ("专票"), and the English and Chinese names of the same topic ("annual leave", "年假"), so that a
// question finds its answer in either language. A question that contains one phrase of a group is
// searched with the others too, and a sentence that contains any phrase of the group matches it.
//
// Keep it small and about meaning, never about one question: each group must be true in general
// ("锁了" is "锁定"), not tuned so that a particular question finds a particular sentence.
type Lexicon [][]string

// Domain is the lexicon for the bundled sample corpus' domain: office, HR, finance and IT rules.
var Domain = Lexicon{
	// Everyday paraphrases.
	{"忘记", "忘了", "不记得", "想不起", "forgot", "forget", "forgotten"},
	{"到账", "打款", "付款", "到卡", "paid", "payment"},
	{"顺延", "结转", "延到", "留到", "carry over", "roll over"},
	{"作废", "清零", "失效"},
	{"没休完", "未休完", "没休", "未休", "没用完"},
	{"锁了", "锁定", "被锁", "locked", "lock"},
	{"规定", "要求", "规则", "制度", "rules", "requirements", "policy"},
	{"材料", "证件", "原件", "单据", "票据", "documents", "paperwork"},
	{"第一天", "当天", "首日", "first day"},
	{"打车", "出租车", "网约车", "市内交通", "taxi"},
	{"坐飞机", "飞机", "机票", "航班", "flight", "plane"},
	{"舱", "舱位"},
	{"丢了", "丢失", "遗失", "被盗", "lost", "stolen"},
	{"开错", "写错", "填错", "有误", "wrong"},
	{"步骤", "流程", "操作步骤", "steps", "procedure", "process"},
	{"上班", "工作时间", "到岗", "working hours", "office hours"},
	{"没有发票", "没发票", "无票", "无法取得发票", "no invoice", "without an invoice"},
	// Units, so that "how many days" finds "5 天".
	{"天", "day"},
	{"小时", "hour"},
	{"分钟", "minute"},
	{"个月", "month"},
	// Abbreviations the documents define.
	{"专票", "专用发票"},
	{"普票", "普通发票"},
	// Topics by their Chinese and English names.
	{"电脑", "笔记本", "laptop", "computer"},
	{"连上", "连接", "连不上", "connect", "connected", "access"},
	{"内网", "internal"},
	{"网站", "网页", "sites", "site", "pages"},
	{"打不开", "无法访问", "访问不了", "进不去", "not load", "do not load", "cannot open"},
	{"访客", "来访", "客人", "guest", "visitor"},
	{"无线", "wi-fi", "wifi"},
	{"路由器", "热点", "router", "hotspot"},
	{"年假", "年休假", "annual leave"},
	{"会议室", "meeting room"},
	{"预订", "预定", "订", "book", "booking", "reserve"},
	{"密码", "password"},
	{"重置", "找回", "reset"},
	{"报销", "reimbursement", "reimburse", "expense claim"},
	{"发票", "invoice"},
	{"出差", "差旅", "business trip", "travel"},
	{"入职", "新员工", "onboarding", "new employee"},
	{"试用期", "probation"},
}

// Match returns the groups of l that q contains a phrase of, in lexicon order, and q with those
// phrases blanked out (so that what is left yields the question's other terms).
func (l Lexicon) Match(q string) (groups [][]string, rest string) {
	lq := strings.ToLower(q)
	rest = lq
	for _, g := range l {
		hit := false
		for _, p := range g {
			for {
				i := phraseIndex(rest, p)
				if i < 0 {
					break
				}
				hit = true
				end := i + len(p)
				if !HasHan(p) {
					// A Latin phrase takes the rest of its word along ("lock" in "locked").
					for end < len(rest) {
						r, size := utf8.DecodeRuneInString(rest[end:])
						if !isWordRune(r) {
							break
						}
						end += size
					}
				}
				rest = rest[:i] + strings.Repeat(" ", end-i) + rest[end:]
			}
		}
		if hit {
			groups = append(groups, g)
		}
	}
	return groups, rest
}

// ContainsPhrase reports whether s contains phrase p: anywhere for Chinese, at a word start for
// Latin ("lock" in "locked", not in "block"). s must be lower-case.
func ContainsPhrase(s, p string) bool { return phraseIndex(s, p) >= 0 }

// ContainsPhraseHan is ContainsPhrase for a phrase p whose HasHan(p) the caller already knows (han):
// scoring asks about the same phrases for every sentence.
func ContainsPhraseHan(s, p string, han bool) bool { return phraseIndexHan(s, p, han) >= 0 }

func phraseIndex(s, p string) int { return phraseIndexHan(s, p, HasHan(p)) }

func phraseIndexHan(s, p string, han bool) int {
	if han {
		return strings.Index(s, p)
	}
	off := 0
	for {
		i := strings.Index(s[off:], p)
		if i < 0 {
			return -1
		}
		i += off
		if i == 0 || !isWordRune(lastRune(s[:i])) {
			return i
		}
		off = i + 1
	}
}

func lastRune(s string) rune {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r
}

func isWordRune(r rune) bool {
	return r < 0x3000 && (unicode.IsLetter(r) || unicode.IsDigit(r))
}

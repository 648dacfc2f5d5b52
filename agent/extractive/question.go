package extractive

import (
	"slices"
	"strings"

	"github.com/citegate/citegate/internal/textseg"
)

// question is a user's question as the extractive model reads it: its language, whether it asks
// for a list, and its parts ("年假有几天？没休完的可以顺延吗？" asks two things), each searched and
// answered on its own.
type question struct {
	zh    bool
	list  bool
	parts []qpart
}

// qpart is one thing a question asks.
type qpart struct {
	list  bool   // the part asks for a list ("哪些", "列出要点")
	ask   string // the part as the user wrote it, for a "not found" line
	text  string // what the part asks, without list instructions
	topic string // for a later part, the topic of the first ("密码" for "忘了怎么办？"), else ""
	query string // the search query: topic, text and the lexicon's other phrases for them
}

// maxQuestionParts bounds the searches one question makes.
const maxQuestionParts = 4

// zhQuestionCues and enQuestionCues mark a clause that asks something; a question splits at a
// comma or a conjunction only where both sides ask.
var (
	zhQuestionCues = []string{"多久", "多少", "多长", "几", "怎么", "怎样", "如何", "什么", "哪", "吗", "呢", "是否", "能否", "可否", "有没有", "能不能"}
	enQuestionCues = []string{"how", "what", "when", "where", "which", "who", "why", "can", "could", "do", "does", "is", "are", "should", "may"}
	// clauseJoins separate two questions in one sentence ("住宿标准是多少，伙食补贴呢").
	clauseJoins = []string{"，", ", and ", ", ", "以及", "还有", "另外", " and "}
	// listInstructions only ask for the answer's shape; they are no part of their own.
	listInstructions = []string{"请列出要点", "请列举要点", "列出要点", "请列出", "请列举", "列出", "列举", "要点", "分条说明",
		"please list them", "list them", "please list", "list"}
	// listCues mark a question answered by a list: the items or steps of one section.
	listCues = []string{"哪些", "列出", "列举", "要点", "清单", "有什么要求", "步骤", "list", "what are the", "steps", "which documents"}
	// zhLeadIns open a question without asking anything ("那", "请问").
	zhLeadIns = []string{"那么", "那", "请问", "我想问一下", "我想问", "另外", "还有", "以及"}
	// zhPredicates end the subject of a Chinese question ("差旅报销|需要哪些材料").
	zhPredicates = []string{"需要", "有", "是", "多久", "多少", "多长", "几", "怎么", "如何", "可以", "能", "要", "什么", "哪", "会", "吗", "呢", "最", "在"}
)

// parseQuestion splits a question into its parts: at sentence ends, and at commas and
// conjunctions between two clauses that each ask something. A part that is only an instruction
// ("请列出要点") marks the question as a list question instead. A later part borrows the topic of
// the first, because users write "密码多久过期？忘了怎么办？" and mean the password in both.
func parseQuestion(text string) question {
	q := question{zh: textseg.HasHan(text)}
	for _, sent := range textseg.Sentences(strings.ReplaceAll(text, "\n", "。")) {
		for _, clause := range splitClauses(strings.TrimSpace(sent)) {
			ask := strings.TrimSpace(clause)
			body := ask
			for _, w := range listInstructions {
				if i := strings.Index(strings.ToLower(body), w); i >= 0 {
					body = body[:i] + body[i+len(w):]
					q.list = true
				}
			}
			if len(conceptsOf(body, 1)) == 0 {
				continue
			}
			q.parts = append(q.parts, qpart{ask: strings.TrimRight(ask, "？?。.！!；;，, "), text: body, list: asksList(ask)})
		}
	}
	if len(q.parts) == 0 {
		return question{zh: q.zh, list: q.list, parts: []qpart{{ask: text, text: text, query: text, list: q.list || asksList(text)}}}
	}
	if len(q.parts) > maxQuestionParts {
		// Too many parts to search one by one: the rest rides along with the last.
		last := &q.parts[maxQuestionParts-1]
		for _, p := range q.parts[maxQuestionParts:] {
			last.ask += " " + p.ask
			last.text += " " + p.text
		}
		q.parts = q.parts[:maxQuestionParts]
	}
	topic := questionTopic(q.parts[0].text)
	for i := range q.parts {
		p := &q.parts[i]
		// "请列出要点" asks for every part as a list.
		p.list = p.list || q.list
		if i > 0 && topic != "" && !strings.Contains(p.text, topic) {
			p.topic = topic
		}
		p.query = expandQuery(strings.TrimSpace(p.topic + " " + strings.TrimSpace(p.text)))
	}
	if len(q.parts) == 1 && strings.TrimSpace(q.parts[0].text) == text {
		// A one-part question is searched as asked, plus its synonyms.
		q.parts[0].query = expandQuery(text)
	}
	return q
}

// asksList reports a part answered by a list: the items or steps of one section.
func asksList(s string) bool {
	ls := strings.ToLower(s)
	return slices.ContainsFunc(listCues, func(c string) bool { return strings.Contains(ls, c) })
}

// splitClauses splits one sentence at commas and conjunctions where both sides ask something.
func splitClauses(s string) []string {
	for _, j := range clauseJoins {
		i := strings.Index(s, j)
		if i <= 0 {
			continue
		}
		left, right := s[:i], s[i+len(j):]
		if asksSomething(left) && asksSomething(right) {
			return append(splitClauses(left), splitClauses(right)...)
		}
	}
	return []string{s}
}

// asksSomething reports whether a clause carries a question word.
func asksSomething(s string) bool {
	ls := strings.ToLower(s)
	for _, c := range zhQuestionCues {
		if strings.Contains(ls, c) {
			return true
		}
	}
	for _, w := range strings.Fields(ls) {
		for _, c := range enQuestionCues {
			if strings.Trim(w, "?,.!") == c {
				return true
			}
		}
	}
	return false
}

// questionTopic is the subject of a question: for Chinese the words before its first predicate
// ("差旅报销" in "那差旅报销需要哪些材料"), for English its terms without the question words.
func questionTopic(s string) string {
	s = strings.TrimSpace(s)
	if !textseg.HasHan(s) {
		var words []string
		for _, w := range strings.Fields(s) {
			if textseg.Fold(strings.Trim(w, "?,.!")) != "" {
				words = append(words, strings.Trim(w, "?,.!"))
			}
		}
		return strings.Join(words, " ")
	}
	for _, l := range zhLeadIns {
		s = strings.TrimPrefix(s, l)
	}
	cut := len(s)
	for _, p := range zhPredicates {
		if i := strings.Index(s, p); i > 0 && i < cut {
			cut = i
		}
	}
	topic := strings.TrimSpace(s[:cut])
	if len(textseg.Terms(topic)) == 0 {
		return ""
	}
	return topic
}

// expandQuery appends to q the lexicon's other phrases for the groups q names, so that the search
// finds "忘记密码" for "密码忘了" and the Chinese document for an English question.
func expandQuery(q string) string {
	groups, _ := textseg.Domain.Match(q)
	lq := strings.ToLower(q)
	var extra []string
	for _, g := range groups {
		for _, p := range g {
			if !strings.Contains(lq, strings.ToLower(p)) {
				extra = append(extra, p)
			}
		}
	}
	if len(extra) == 0 {
		return q
	}
	return q + " " + strings.Join(extra, " ")
}

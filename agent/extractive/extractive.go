// Package extractive is citegate's offline model: it answers without an LLM by searching with the
// question and citing the sentences of the results that answer it best.
package extractive

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/citegate/citegate/agent/llm"
	"github.com/citegate/citegate/internal/textseg"
	"github.com/citegate/citegate/store"
)

// extractiveModel answers without an LLM: it searches with the user's question, picks the
// sentences of the results that overlap the question most and cites each with its result's ref.
// It is citegate's offline default and exercises the whole pipeline (tools, registry, streaming,
// verification) deterministically.
type extractiveModel struct {
	memo *analysisMemo
}

// New returns the offline extractive model.
func New() llm.Model { return &extractiveModel{memo: newAnalysisMemo(memoEntries)} }

// Name implements llm.Model.
func (*extractiveModel) Name() string { return "extractive (no LLM)" }

const (
	extractiveMaxSentences = 3
	// extractiveOtherSourceShare is the share of the best sentence's score a sentence of another
	// document must reach to join the answer.
	extractiveOtherSourceShare = 0.95
	// extractiveCoverageBonus rewards a sentence whose context covers every concept of the part.
	extractiveCoverageBonus = 0.15
	// extractiveMaxListSentences bounds the items a list question gathers from one section.
	extractiveMaxListSentences = 8
	// extractiveMinScore is the share of the question's terms a sentence must contain.
	extractiveMinScore = 0.25
	// extractiveSingleTermScore is the share a sentence matching a single question term must reach.
	extractiveSingleTermScore = 0.4
	maxQueryRunes             = 200
)

// Generate implements Model. The first round searches once per part of the question (see
// parseQuestion); the second answers each part from its own search results.
func (m *extractiveModel) Generate(ctx context.Context, req llm.Request, onDelta func(string)) (llm.Response, error) {
	lastUser := -1
	for i, m := range req.Messages {
		if m.Role == "user" {
			lastUser = i
		}
	}
	if lastUser < 0 {
		return llm.Response{}, fmt.Errorf("extractive: no user message")
	}
	question := strings.TrimSpace(req.Messages[lastUser].Content)
	// Both rounds of a turn read the same question: the second finds the first's reading.
	aq := m.memo.question(question)
	q := aq.q

	var toolMsgs []llm.Message
	for _, m := range req.Messages[lastUser+1:] {
		if m.Role == "tool" && (m.Name == "" || m.Name == "web_search") {
			toolMsgs = append(toolMsgs, m)
		}
	}
	if len(toolMsgs) == 0 {
		if !slices.ContainsFunc(req.Tools, func(t llm.ToolSpec) bool { return t.Name == "web_search" }) {
			return streamText(ctx, pick(q.zh, "当前没有可用的检索工具，无法根据资料回答这个问题。", "No search tool is available, so I cannot answer from sources."), onDelta)
		}
		calls := make([]store.ToolCall, 0, len(q.parts))
		for i, p := range q.parts {
			query := p.query
			if utf8.RuneCountInString(query) > maxQueryRunes {
				query = string([]rune(query)[:maxQueryRunes])
			}
			args, err := json.Marshal(map[string]string{"query": query})
			if err != nil {
				return llm.Response{}, fmt.Errorf("extractive: %w", err)
			}
			calls = append(calls, store.ToolCall{ID: "call_" + strconv.Itoa(i+1), Name: "web_search", Arguments: string(args)})
		}
		return llm.Response{ToolCalls: calls}, nil
	}

	// The loop answers the calls in the order they were made: the i-th result belongs to the i-th
	// part. A transcript that does not pair up so (another model's history) serves every part.
	results := make([][]passage, len(q.parts))
	var searchErrs []string
	for i, tm := range toolMsgs {
		ps, errMsg := m.memo.searchResult(tm.Content)
		if errMsg != "" {
			searchErrs = append(searchErrs, errMsg)
		}
		if len(toolMsgs) == len(q.parts) {
			results[i] = append(results[i], ps...)
			continue
		}
		for k := range results {
			results[k] = append(results[k], ps...)
		}
	}
	return streamText(ctx, composeParts(m.memo, q, aq.parts, results, searchErrs), onDelta)
}

func pick(zh bool, a, b string) string {
	if zh {
		return a
	}
	return b
}

// passage is one search result's content with the ref the loop gave it.
type passage struct {
	ref     int
	order   int
	title   string
	content string
}

// parseSearchResult reads a web_search result; it returns the failure message for the failure shape.
func parseSearchResult(content string) ([]passage, string) {
	var doc struct {
		Error   json.RawMessage `json:"error"`
		Results []struct {
			Title   string `json:"title"`
			URL     string `json:"url"`
			Content string `json:"content"`
			Ref     int    `json:"ref"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(content), &doc); err != nil {
		return nil, "unreadable search result"
	}
	if len(doc.Error) > 0 {
		var msg string
		if json.Unmarshal(doc.Error, &msg) != nil || strings.TrimSpace(msg) == "" {
			msg = string(doc.Error)
		}
		return nil, strings.TrimSpace(msg)
	}
	var out []passage
	for i, r := range doc.Results {
		// A result without a ref (past the registry cap, or without a usable URL) cannot be cited,
		// and the extractive model says nothing it cannot cite.
		if r.Ref <= 0 {
			continue
		}
		out = append(out, passage{ref: r.Ref, order: i, title: r.Title, content: r.Content})
	}
	return out, ""
}

// scored is a sentence that answers (part of) the question.
type scored struct {
	text   string
	ref    int
	score  float64
	order  int // result order, then sentence order: ties keep the search ranking
	meta   bool
	figure int // 2: a figure in the unit asked for, 1: some figure, 0: none (or no amount asked)
	han    bool
	pass   int    // the passage it comes from
	ctx    string // its section heading
	item   bool   // a list item, step or table row
	step   bool   // a numbered step of a procedure
	hits   uint64 // bit i: the sentence itself names concept i
	about  bool   // its heading or document title names something the part asks about
}

// isMetaSentence reports sentences about the document rather than its subject ("本文说明…",
// "This guide explains…") and cross-references ("见《…》", "see the … guide"), which answer nothing.
func isMetaSentence(s string) bool {
	ls := strings.ToLower(s)
	for _, p := range []string{"本文", "本指南", "本页", "本制度", "本规定", "本手册", "本标准", "本流程", "本办法",
		"this article", "this guide", "this page", "this document", "these rules", "this policy", "this is the"} {
		if strings.HasPrefix(ls, p) {
			return true
		}
	}
	return strings.Contains(s, "见《") || strings.Contains(s, "参见") || strings.Contains(ls, "see the ")
}

// compose answers question from passages, every part of it from all of them; see composeParts.
func compose(question string, zh bool, passages []passage, searchErrs []string) string {
	return composeMemo(nil, question, zh, passages, searchErrs)
}

// composeMemo is compose with the passages' analyses kept in memo.
func composeMemo(memo *analysisMemo, question string, zh bool, passages []passage, searchErrs []string) string {
	aq := memo.question(question)
	q := aq.q // a copy: the memo's reading keeps its own language
	q.zh = zh
	results := make([][]passage, len(q.parts))
	for i := range results {
		results[i] = passages
	}
	return composeParts(memo, q, aq.parts, results, searchErrs)
}

// composeParts writes the answer: for each part of the question the best sentences of that part's
// search results, each cited with its source's ref, and a plain "not found" for a part nothing
// answers. An answer drawn only from documents in the other language says so first.
func composeParts(memo *analysisMemo, q question, parts []partAnalysis, results [][]passage, searchErrs []string) string {
	total := 0
	for _, r := range results {
		total += len(r)
	}
	if total == 0 && len(searchErrs) > 0 {
		msg := strings.TrimRight(searchErrs[0], "。.!！ ")
		return pick(q.zh, "检索失败："+msg+"。暂时无法根据资料回答这个问题。", "The search failed: "+msg+". I cannot answer from sources right now.")
	}
	notFound := pick(q.zh, "没有在检索到的资料中找到与该问题直接相关的内容。", "I could not find anything directly relevant to this question in the retrieved sources.")
	picked := make([][]scored, len(q.parts))
	found, other := 0, 0
	seen := map[string]bool{}
	for i, p := range q.parts {
		for _, c := range selectSentences(memo, p, &parts[i], results[i]) {
			// A sentence that answers two parts is said once.
			if seen[c.text] {
				continue
			}
			seen[c.text] = true
			picked[i] = append(picked[i], c)
			found++
			if c.han != q.zh {
				other++
			}
		}
	}
	if found == 0 {
		return notFound
	}
	var b strings.Builder
	switch {
	case other < found:
		b.WriteString(pick(q.zh, "根据检索到的资料：\n\n", "Based on the retrieved sources:\n\n"))
	case q.zh:
		b.WriteString("知识库中只有英文资料，以下为原文摘录：\n\n")
	default:
		b.WriteString("The knowledge base has this only in Chinese; the relevant passages:\n\n")
	}
	lines := 0
	for i, p := range q.parts {
		if len(picked[i]) == 0 {
			if lines > 0 {
				b.WriteString("\n")
			}
			b.WriteString(pick(q.zh, "（没有在检索到的资料中找到关于“"+p.ask+"”的内容。）", "(I could not find anything about “"+p.ask+"” in the retrieved sources.)"))
			lines++
			continue
		}
		for _, c := range picked[i] {
			if lines > 0 {
				b.WriteString("\n")
			}
			b.WriteString(c.text)
			b.WriteString("[^" + strconv.Itoa(c.ref) + "^]")
			lines++
		}
	}
	return b.String()
}

// concept is one thing a question asks about: a term of its own, or a lexicon group whose
// phrases all say the same. A sentence matches it when it contains any of its forms.
type concept struct {
	term    string   // a term of textseg.Terms; "" for a lexicon group
	phrases []string // lower-case lexicon phrases
	han     []bool   // han[i]: textseg.HasHan(phrases[i])
	factor  float64  // 1 for the part's own words, topicFactor for the topic it borrowed
}

// topicFactor weights a topic a later part borrows from the first ("密码" in "忘了怎么办？"): it
// says where to look, but the answering sentence need not repeat it.
const topicFactor = 0.5

func (c concept) in(terms map[string]bool, lower string) bool {
	if c.term != "" {
		// A lone Han character ("换", "查") is a word of its own; sentences hold it inside bigrams.
		if r, size := utf8.DecodeRuneInString(c.term); size == len(c.term) && r >= 0x2E80 {
			return strings.Contains(lower, c.term)
		}
		return terms[c.term]
	}
	for i, p := range c.phrases {
		if textseg.ContainsPhraseHan(lower, p, c.han[i]) {
			return true
		}
	}
	return false
}

func (c concept) key() string {
	if c.term != "" {
		return c.term
	}
	return "\x00" + strings.Join(c.phrases, "|")
}

// conceptsOf returns the concepts of text: the lexicon groups it names, then the terms of what is
// left, in a fixed order so that floating-point sums, and so the answer, are deterministic.
func conceptsOf(text string, factor float64) []concept {
	groups, rest := textseg.Domain.Match(textseg.StripQuestion(text))
	var out []concept
	for _, g := range groups {
		ph := make([]string, len(g))
		han := make([]bool, len(g))
		for i, p := range g {
			ph[i] = strings.ToLower(p)
			han[i] = textseg.HasHan(ph[i])
		}
		out = append(out, concept{phrases: ph, han: han, factor: factor})
	}
	ts := textseg.Terms(rest)
	keys := make([]string, 0, len(ts))
	for t := range ts {
		keys = append(keys, t)
	}
	slices.Sort(keys)
	for _, t := range keys {
		out = append(out, concept{term: t, factor: factor})
	}
	return out
}

// partAnalysis is what selectSentences needs of a part of the question, worked out once per
// question: its concepts (its own, then those of the topic it borrows that it lacks), how many are
// its own, the amount it asks for, and whether it asks how, asks for a remedy, reads as Chinese.
// It is shared between runs and must not be modified.
type partAnalysis struct {
	concepts []concept
	own      int
	want     quantity
	howTo    bool
	remedy   bool
	zh       bool
}

func analysePart(p qpart) partAnalysis {
	concepts := conceptsOf(p.text, 1)
	own := len(concepts)
	if p.topic != "" {
		have := map[string]bool{}
		for _, c := range concepts {
			have[c.key()] = true
		}
		for _, c := range conceptsOf(p.topic, topicFactor) {
			if !have[c.key()] {
				concepts = append(concepts, c)
			}
		}
	}
	return partAnalysis{concepts: concepts, own: own, want: quantityWanted(p.text), howTo: asksHow(p.text),
		remedy: asksRemedy(p.text), zh: textseg.ReadsAsChinese(p.text)}
}

// selectSentences picks the sentences of passages that answer part p: those that share enough of
// the part's concepts (weighted by rarity among the retrieved sentences), preferring figures for
// an amount question and steps for a how-question; for a list question, the items of the best
// sentence's section.
func selectSentences(memo *analysisMemo, p qpart, pa *partAnalysis, passages []passage) []scored {
	list := p.list
	concepts, own := pa.concepts, pa.own
	if own == 0 {
		return nil
	}
	need := min(2, own)

	type candidate struct {
		scored
		terms   map[string]bool
		lower   string
		context map[string]bool // terms of the section heading
		ctxLow  string
		title   map[string]bool // terms of the document title
		titLow  string
		step    bool
		hasNum  bool
		hasUnit bool
	}
	want, howTo := pa.want, pa.howTo
	var sents []candidate
	seen := map[string]bool{}
	for pi, ps := range passages {
		title := memo.title(ps.title)
		for _, s := range memo.passage(ps.content) {
			if seen[s.text] {
				continue
			}
			seen[s.text] = true
			num, unit := want.matchLower(s.lower)
			// The document's title and the section heading say what a sentence is about.
			sents = append(sents, candidate{
				scored: scored{text: s.text, ref: ps.ref, order: len(sents), meta: s.meta, han: s.han, pass: pi, ctx: s.context, item: s.item, step: s.step},
				terms:  s.terms, lower: s.lower,
				context: s.ctxTerms, ctxLow: s.ctxLow,
				title: title.terms, titLow: title.lower,
				step: s.step, hasNum: num, hasUnit: unit,
			})
		}
	}
	// Concepts are weighted by how rare they are among the retrieved sentences, so the words that
	// distinguish the question ("写错") count more than the topic every result shares ("发票").
	weight := make([]float64, len(concepts))
	total := 0.0
	// Whether a sentence, its heading or its document's title names a concept is asked more than
	// once below; each is worked out once. Sentences under one heading share its answers, and the
	// sentences of one passage their title's.
	nc := len(concepts)
	inSent := make([]bool, len(sents)*nc)
	for i, c := range concepts {
		df := 0
		for si, s := range sents {
			if c.in(s.terms, s.lower) {
				inSent[si*nc+i] = true
				df++
			}
		}
		weight[i] = c.factor * (1 + math.Log(float64(len(sents)+1)/float64(df+1)))
		total += weight[i]
	}
	ctxIn := map[string][]bool{}
	ctxHits := func(s *candidate) []bool {
		h, ok := ctxIn[s.ctx]
		if !ok {
			h = make([]bool, nc)
			for i, c := range concepts {
				h[i] = c.in(s.context, s.ctxLow)
			}
			ctxIn[s.ctx] = h
		}
		return h
	}
	titleIn := make([][]bool, len(passages))
	titleHits := func(s *candidate) []bool {
		if titleIn[s.pass] == nil {
			h := make([]bool, nc)
			for i, c := range concepts {
				h[i] = c.in(s.title, s.titLow)
			}
			titleIn[s.pass] = h
		}
		return titleIn[s.pass]
	}
	var cands []scored
	for si := range sents {
		s := &sents[si]
		hit, ctxHit, sum := 0, 0, 0.0
		var hits uint64
		about := false
		inCtx, inTitle := ctxHits(s), titleHits(s)
		for i, c := range concepts {
			if c.factor == 1 && !about && (inCtx[i] || inTitle[i]) {
				about = true
			}
			switch {
			case inSent[si*nc+i]:
				if c.factor == 1 {
					hit++
				}
				if i < 64 {
					hits |= 1 << i
				}
				sum += weight[i]
			case inCtx[i]:
				// The heading says what the sentence is about ("## 自助重置密码" over "输入域账号…").
				if c.factor == 1 {
					ctxHit++
				}
				sum += 0.5 * weight[i]
			case inTitle[i]:
				// The title says so too, but for every sentence of the document alike.
				if c.factor == 1 {
					ctxHit++
				}
				sum += 0.25 * weight[i]
			}
		}
		score := sum / total
		// A sentence whose sentence, heading or title names everything the part asks about beats
		// one that names more of it itself but misses a part entirely ("审批流程" of IT devices for
		// "报销的审批流程").
		if own >= 2 && hit+ctxHit == own {
			score += extractiveCoverageBonus
		}
		// A list item under a heading that names the question ("## Data classification") belongs to
		// the list a list question asks for, though it does not repeat the heading's words.
		listItem := list && s.item && ctxHit >= need
		// One term of several is enough only when it is the question's distinctive one ("USB").
		if (hit == 0 && !listItem) || (2*hit+ctxHit < 2*need && score < extractiveSingleTermScore) || score < extractiveMinScore {
			continue
		}
		// A question after an amount ("几天", "多少钱", "how many days") is answered by a figure,
		// best one in the unit asked for.
		switch {
		case s.hasUnit:
			score += 0.3
		case s.hasNum:
			score += 0.15
		}
		// "怎么申请", "how do I reset": the steps of a procedure answer it.
		if howTo && s.step {
			score += 0.2
		}
		// The search ranked whole documents: of two equal sentences, the one from the better
		// document wins.
		switch s.pass {
		case 0:
			score += 0.1
		case 1:
			score += 0.05
		}
		c := s.scored
		c.score = score
		c.hits = hits
		c.about = about
		if s.hasUnit {
			c.figure = 2
		} else if s.hasNum {
			c.figure = 1
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		return nil
	}
	// Sentences about the document only serve when nothing else matched.
	if slices.ContainsFunc(cands, func(c scored) bool { return !c.meta }) {
		cands = slices.DeleteFunc(cands, func(c scored) bool { return c.meta })
	}
	cands = preferLanguage(cands, pa.zh)
	// An amount question is answered by the sentences that give one, in the unit asked for if any do.
	if best := slices.MaxFunc(cands, func(a, b scored) int { return cmp.Compare(a.figure, b.figure) }).figure; best > 0 {
		cands = slices.DeleteFunc(cands, func(c scored) bool { return c.figure < best })
	}
	// A how-question is answered by the steps of a procedure, the way an amount question is
	// answered by a figure: by the steps of a procedure whose heading or document title names what
	// is asked, not by a step of another procedure that mentions it in passing ("connect to the VPN"
	// as step 5 of a password reset).
	procedureStep := func(c scored) bool { return c.step && c.about }
	if howTo && slices.ContainsFunc(cands, procedureStep) {
		cands = slices.DeleteFunc(cands, func(c scored) bool { return !procedureStep(c) })
	}
	slices.SortStableFunc(cands, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	best := cands[0]
	var picked []scored
	procedure := best.step && (howTo || pa.remedy)
	if (list || procedure) && best.item {
		// A list question is answered by the whole list, and a how-question by the whole procedure,
		// that the best sentence belongs to. For a list question, a section whose heading names the
		// question ("## 发票要求" for "发票有哪些规定") is that list even if another item scores higher.
		from := best
		if list {
			bestCover := 0.0
			for _, c := range cands {
				if !c.item {
					continue
				}
				cover := 0.0
				inCtx := ctxHits(&sents[c.order])
				for i := range concepts {
					if inCtx[i] {
						cover += weight[i]
					}
				}
				if cover/total >= 0.5 && cover > bestCover+1e-9 {
					from, bestCover = c, cover
				}
			}
		}
		for _, s := range sents {
			if s.pass == from.pass && s.ctx == from.ctx && s.item && !s.meta && len(picked) < extractiveMaxListSentences {
				picked = append(picked, s.scored)
			}
		}
	}
	if len(picked) < 2 {
		picked = picked[:0]
		for _, c := range cands {
			if len(picked) == extractiveMaxSentences || c.score < best.score*0.6 {
				break
			}
			// The answer stays with the best source unless another says something nearly as
			// relevant and names everything the best sentence names: a sentence that merely shares
			// a word ("遗失" of a badge for "电脑丢了") does not drag in a second document.
			if c.ref != best.ref && (c.score < best.score*extractiveOtherSourceShare || c.hits&best.hits != best.hits) {
				continue
			}
			picked = append(picked, c)
		}
	}
	// "按上述流程申请" points at the procedure above it: that procedure is the answer too.
	for _, c := range slices.Clone(picked) {
		if !refersBack(c.text) {
			continue
		}
		var steps []scored
		for k := c.order - 1; k >= 0 && len(steps) < extractiveMaxListSentences; k-- {
			s := sents[k]
			if s.pass != c.pass || (!s.step && len(steps) > 0) {
				break
			}
			if s.step {
				steps = append(steps, s.scored)
			}
		}
		for _, st := range steps {
			if !slices.ContainsFunc(picked, func(p scored) bool { return p.order == st.order }) {
				picked = append(picked, st)
			}
		}
	}
	// The answer reads in source order, like an excerpt, rather than by score.
	slices.SortFunc(picked, func(a, b scored) int { return cmp.Compare(a.order, b.order) })
	return picked
}

// refersBack reports a sentence that points at the procedure before it ("按上述流程申请",
// "follow the steps above").
func refersBack(s string) bool {
	ls := strings.ToLower(s)
	return slices.ContainsFunc([]string{"上述流程", "上述步骤", "以上流程", "以上步骤", "如上流程", "steps above", "above steps", "procedure above"}, func(w string) bool { return strings.Contains(ls, w) })
}

// asksRemedy reports a question after what to do ("怎么办", "what now"), which a procedure answers.
func asksRemedy(q string) bool {
	lq := strings.ToLower(q)
	return slices.ContainsFunc([]string{"怎么办", "怎么处理", "what now", "what should i do", "what do i do"}, func(w string) bool { return strings.Contains(lq, w) })
}

// preferLanguage keeps the candidates in the question's language unless those in the other
// language answer clearly better: an English question is answered from an English document when
// one matches, and from a Chinese one (with a notice) only when none does.
func preferLanguage(cands []scored, zh bool) []scored {
	same, other := -1.0, -1.0
	for _, c := range cands {
		if c.han == zh {
			same = max(same, c.score)
		} else {
			other = max(other, c.score)
		}
	}
	switch {
	case other < 0 || same < 0:
		return cands
	case same >= 0.8*other:
		return slices.DeleteFunc(cands, func(c scored) bool { return c.han != zh })
	default:
		return slices.DeleteFunc(cands, func(c scored) bool { return c.han == zh })
	}
}

// sentence is one statement of a passage; context is the heading it stands under, whose terms
// count for a little when the sentence itself does not repeat them.
type sentence struct {
	text    string
	context string
	step    bool // from a numbered list item: a step of a procedure
	item    bool // from a list item (numbered or not) or a table row
}

// splitSentences cuts a passage into plain-text sentences; see passageSentences.
func splitSentences(text string) []string {
	var out []string
	for _, s := range passageSentences(text) {
		out = append(out, s.text)
	}
	return out
}

// passageSentences cuts a passage into sentences, CJK-aware: after 。！？；!?; and ". ", and at line
// breaks. Markdown decoration is removed so the sentences read as plain text. Headings (and short
// heading-like lines) state nothing themselves but become the context of what follows them. A
// Markdown table row becomes one self-contained sentence that names its columns ("住宿标准：一类：
// 北京…，普通员工 600 元，经理及以上 800 元。"), because "| 600 元 | 800 元 |" alone answers nothing.
func passageSentences(text string) []sentence {
	var out []sentence
	heading := ""
	var header []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		raw := strings.TrimSpace(lines[i])
		if strings.HasPrefix(raw, "#") {
			heading, header = cleanLine(raw), nil
			continue
		}
		if strings.HasPrefix(raw, "|") {
			cells := tableCells(raw)
			if isSeparatorRow(cells) {
				continue
			}
			if i+1 < len(lines) && isSeparatorRow(tableCells(strings.TrimSpace(lines[i+1]))) {
				header = cells
				i++
				continue
			}
			if s := rowSentence(heading, header, cells); s != "" {
				out = append(out, sentence{text: s, context: heading, item: true})
			}
			continue
		}
		header = nil
		line := cleanLine(raw)
		step := isNumberedItem(raw)
		item := step || strings.HasPrefix(raw, "- ") || strings.HasPrefix(raw, "* ") || strings.HasPrefix(raw, "+ ")
		if line == "" {
			continue
		}
		if looksLikeHeading(line) {
			heading = line
			continue
		}
		for _, t := range textseg.Sentences(line) {
			out = appendSentence(out, sentence{text: t, context: heading, step: step, item: item})
		}
	}
	return out
}

// tableCells splits a Markdown table row into its trimmed cells; "\|" is a pipe inside a cell.
func tableCells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	if strings.HasSuffix(row, "|") && !strings.HasSuffix(row, `\|`) {
		row = row[:len(row)-1]
	}
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

func isSeparatorRow(cells []string) bool {
	for _, c := range cells {
		if c == "" || strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return len(cells) > 0
}

// genericColumns are column names that only say "the value": a two-column table under them reads
// best as "key: value".
var genericColumns = map[string]bool{
	"内容": true, "说明": true, "备注": true, "值": true, "描述": true, "做法": true, "处理方法": true, "解决方法": true,
	"value": true, "description": true, "details": true, "what to do": true, "action": true, "notes": true, "answer": true,
}

// rowSentence writes a table row as one sentence: the section heading, the row's first cell, then
// each further cell after its column name. Without a header the cells are simply joined.
func rowSentence(heading string, header, cells []string) string {
	for i := range cells {
		cells[i] = strings.TrimRight(stripInline(cells[i]), "。.；;，, ")
	}
	zh := textseg.HasHan(heading + strings.Join(header, "") + strings.Join(cells, ""))
	colon, comma, afterLabel, stop := "：", "，", "，", "。"
	if !zh {
		colon, comma, afterLabel, stop = ": ", "; ", " — ", "."
	}
	label := ""
	var parts []string
	for i, c := range cells {
		if c == "" {
			continue
		}
		h := ""
		if i < len(header) {
			h = stripInline(header[i])
		}
		switch {
		case i == 0:
			label = c
		case h == "":
			parts = append(parts, c)
		case len(cells) == 2 && label != "" && genericColumns[strings.ToLower(h)]:
			label += colon + c // "名称（抬头）：云杉科技有限公司"
		case zh && c[0] < 0x80:
			parts = append(parts, h+" "+c) // "普通员工 600 元"
		default:
			parts = append(parts, h+colon+c)
		}
	}
	s := strings.Join(parts, comma)
	switch {
	case label == "" && s == "":
		return ""
	case label == "":
	case s == "":
		s = label
	default:
		s = label + afterLabel + s
	}
	if heading != "" {
		s = heading + colon + s
	}
	return s + stop
}

// looksLikeHeading reports a short line without sentence punctuation or figures, such as a section
// title ("年假天数") or a table header that search passages carry as plain lines.
func looksLikeHeading(line string) bool {
	if utf8.RuneCountInString(line) > 16 {
		return false
	}
	return !strings.ContainsAny(line, "。！？；，,.!?;：:0123456789")
}

func appendSentence(out []sentence, s sentence) []sentence {
	s.text = strings.TrimSpace(s.text)
	if utf8.RuneCountInString(s.text) < 4 {
		return out
	}
	return append(out, s)
}

// isNumberedItem reports a numbered list item: one to three ASCII digits, then ".", ")" or "、"
// (what the regular expression `^\d{1,3}[.)、]` matches, without running one per line).
func isNumberedItem(line string) bool {
	n := 0
	for n < len(line) && n <= 3 && '0' <= line[n] && line[n] <= '9' {
		n++
	}
	if n == 0 || n > 3 {
		return false
	}
	rest := line[n:]
	return strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, ")") || strings.HasPrefix(rest, "、")
}

// cleanLine strips Markdown decoration: headings, list bullets, emphasis, code ticks and table
// pipes (a table row becomes its cells joined by commas; separator rows vanish).
func cleanLine(line string) string {
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "|") {
		var keep []string
		for _, c := range tableCells(line) {
			if strings.Trim(c, "-: ") == "" {
				continue
			}
			keep = append(keep, c)
		}
		line = strings.Join(keep, "，")
	}
	line = strings.TrimLeft(line, "#>")
	line = strings.TrimSpace(line)
	for _, p := range []string{"- ", "* ", "+ "} {
		line = strings.TrimPrefix(line, p)
	}
	if i := strings.Index(line, ". "); i > 0 && i <= 3 && strings.Trim(line[:i], "0123456789") == "" {
		line = line[i+2:]
	}
	return stripInline(line)
}

// inlineMarkup is built once: a Replacer is costly to build and this runs for every sentence.
var inlineMarkup = strings.NewReplacer("**", "", "__", "", "`", "")

// stripInline removes inline Markdown emphasis and code ticks.
func stripInline(s string) string {
	return strings.TrimSpace(inlineMarkup.Replace(s))
}

// quantity is what an amount question asks for: a figure, and possibly the units it comes in.
type quantity struct {
	number bool
	units  []string
}

// quantityWanted reads what amount, if any, a question asks for: "年假有几天" wants a figure in
// 天, "差旅住宿标准是多少" any figure, "how long is the session" a duration.
func quantityWanted(q string) quantity {
	lq := strings.ToLower(q)
	durations := []string{"分钟", "小时", "个小时", "天", "工作日", "个工作日", "周", "个月", "年", "minute", "hour", "day", "week", "month", "year"}
	for _, w := range []string{"多久", "多长时间", "多长", "什么时候", "何时", "how long", "what time", "几点", "when"} {
		if strings.Contains(lq, w) {
			return quantity{number: true, units: durations}
		}
	}
	zhUnits := map[string][]string{
		"钱": {"元"}, "元": {"元"}, "块": {"元"}, "天": {"天"}, "小时": {"小时"}, "分钟": {"分钟"}, "个月": {"个月"}, "月": {"月"},
		"年": {"年"}, "周": {"周"}, "次": {"次"}, "位": {"位"}, "台": {"台"}, "人": {"人"}, "个工作日": {"工作日"}, "公里": {"公里"},
	}
	for _, w := range []string{"几", "多少"} {
		i := strings.Index(lq, w)
		if i < 0 {
			continue
		}
		rest := lq[i+len(w):]
		// The longest unit word right after the question word wins ("个工作日" over "个").
		var best string
		for u := range zhUnits {
			if strings.HasPrefix(rest, u) && len(u) > len(best) {
				best = u
			}
		}
		return quantity{number: true, units: zhUnits[best]}
	}
	for _, w := range []string{"how many ", "how much "} {
		i := strings.Index(lq, w)
		if i < 0 {
			continue
		}
		next := strings.Fields(lq[i+len(w):])
		if len(next) > 0 && w == "how many " {
			u := strings.TrimRight(next[0], "?.!,")
			if len(u) > 3 && strings.HasSuffix(u, "s") {
				u = u[:len(u)-1]
			}
			return quantity{number: true, units: []string{u}}
		}
		return quantity{number: true}
	}
	return quantity{}
}

// match reports whether s holds a figure, and whether one is followed by a wanted unit
// ("5 天", "600 元", "30 minutes").
func (q quantity) match(s string) (number, unit bool) {
	if !q.number {
		return false, false
	}
	return q.matchLower(strings.ToLower(s))
}

// matchLower is match for a text already in lower case.
func (q quantity) matchLower(ls string) (number, unit bool) {
	if !q.number {
		return false, false
	}
	for i, r := range ls {
		if r < '0' || r > '9' {
			continue
		}
		number = true
		j := i
		for j < len(ls) && (ls[j] >= '0' && ls[j] <= '9' || ls[j] == '.' || ls[j] == ',') {
			j++
		}
		rest := strings.TrimLeft(ls[j:], " ")
		for _, u := range q.units {
			if strings.HasPrefix(rest, u) {
				return true, true
			}
		}
	}
	return number, false
}

// asksHow reports a question after a procedure.
func asksHow(q string) bool {
	lq := strings.ToLower(q)
	for _, w := range []string{"怎么", "怎样", "如何", "步骤", "流程", "how do", "how to", "how can", "steps"} {
		if strings.Contains(lq, w) && !strings.Contains(lq, "怎么办") {
			return true
		}
	}
	return false
}

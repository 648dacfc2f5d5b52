package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/citegate/citegate/store"
)

// extractiveModel answers without an LLM: it searches with the user's question, picks the
// sentences of the results that overlap the question most and cites each with its result's ref.
// It is citegate's offline default and exercises the whole pipeline (tools, registry, streaming,
// verification) deterministically.
type extractiveModel struct{}

// NewExtractive returns the offline extractive model.
func NewExtractive() Model { return extractiveModel{} }

// Name implements Model.
func (extractiveModel) Name() string { return "extractive (no LLM)" }

const (
	extractiveMaxSentences = 3
	// extractiveMinScore is the share of the question's terms a sentence must contain.
	extractiveMinScore = 0.25
	// extractiveSingleTermScore is the share a sentence matching a single question term must reach.
	extractiveSingleTermScore = 0.4
	// extractiveChunkRunes is the size of streamed deltas, small so streaming paths are exercised.
	extractiveChunkRunes = 3
	maxQueryRunes        = 200
)

// Generate implements Model.
func (extractiveModel) Generate(ctx context.Context, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
	lastUser := -1
	for i, m := range req.Messages {
		if m.Role == "user" {
			lastUser = i
		}
	}
	if lastUser < 0 {
		return ModelResponse{}, fmt.Errorf("extractive: no user message")
	}
	question := strings.TrimSpace(req.Messages[lastUser].Content)
	zh := hasHan(question)

	var toolMsgs []ChatMessage
	for _, m := range req.Messages[lastUser+1:] {
		if m.Role == "tool" {
			toolMsgs = append(toolMsgs, m)
		}
	}
	if len(toolMsgs) == 0 {
		if !slices.ContainsFunc(req.Tools, func(t ToolSpec) bool { return t.Name == "web_search" }) {
			return streamText(ctx, pick(zh, "当前没有可用的检索工具，无法根据资料回答这个问题。", "No search tool is available, so I cannot answer from sources."), onDelta)
		}
		q := question
		if utf8.RuneCountInString(q) > maxQueryRunes {
			q = string([]rune(q)[:maxQueryRunes])
		}
		args, err := json.Marshal(map[string]string{"query": q})
		if err != nil {
			return ModelResponse{}, fmt.Errorf("extractive: %w", err)
		}
		return ModelResponse{ToolCalls: []store.ToolCall{{ID: "call_1", Name: "web_search", Arguments: string(args)}}}, nil
	}

	var passages []passage
	var searchErrs []string
	for _, m := range toolMsgs {
		if m.Name != "" && m.Name != "web_search" {
			continue
		}
		ps, errMsg := parseSearchResult(m.Content)
		if errMsg != "" {
			searchErrs = append(searchErrs, errMsg)
		}
		passages = append(passages, ps...)
	}
	answer := compose(question, zh, passages, searchErrs)
	return streamText(ctx, answer, onDelta)
}

func pick(zh bool, a, b string) string {
	if zh {
		return a
	}
	return b
}

// streamText hands text to onDelta a few runes at a time.
func streamText(ctx context.Context, text string, onDelta func(string)) (ModelResponse, error) {
	var sent strings.Builder
	rest := text
	for rest != "" {
		if err := ctx.Err(); err != nil {
			return ModelResponse{Text: sent.String()}, fmt.Errorf("extractive: %w", err)
		}
		n := 0
		for i := 0; i < extractiveChunkRunes && n < len(rest); i++ {
			_, size := utf8.DecodeRuneInString(rest[n:])
			n += size
		}
		chunk := rest[:n]
		rest = rest[n:]
		sent.WriteString(chunk)
		onDelta(chunk)
	}
	return ModelResponse{Text: text}, nil
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

type scored struct {
	text   string
	ref    int
	score  float64
	order  int // result order, then sentence order: ties keep the search ranking
	meta   bool
	figure int // 2: a figure in the unit asked for, 1: some figure, 0: none (or no amount asked)
}

// isMetaSentence reports sentences about the document rather than its subject ("本文说明…",
// "This guide explains…") and cross-references ("见《…》", "see the … guide"), which answer nothing.
func isMetaSentence(s string) bool {
	for _, p := range []string{"本文", "本指南", "本页", "本制度", "本规定", "本手册", "本标准", "本流程", "本办法",
		"this article", "this guide", "this page", "this document", "these rules", "this policy"} {
		if strings.HasPrefix(strings.ToLower(s), p) {
			return true
		}
	}
	return strings.Contains(s, "见《") || strings.Contains(s, "参见") || strings.Contains(strings.ToLower(s), "see the ")
}

// compose writes the answer from the best sentences, each cited with its source's ref.
func compose(question string, zh bool, passages []passage, searchErrs []string) string {
	if len(passages) == 0 && len(searchErrs) > 0 {
		msg := strings.TrimRight(searchErrs[0], "。.!！ ")
		return pick(zh, "检索失败："+msg+"。暂时无法根据资料回答这个问题。", "The search failed: "+msg+". I cannot answer from sources right now.")
	}
	notFound := pick(zh, "没有在检索到的资料中找到与该问题直接相关的内容。", "I could not find anything directly relevant to this question in the retrieved sources.")
	qTerms := terms(zhQuestionPhrases.Replace(question))
	if len(qTerms) == 0 {
		return notFound
	}
	need := min(2, len(qTerms))

	type candidate struct {
		text    string
		ref     int
		order   int
		terms   map[string]bool
		context map[string]bool // terms of the section heading
		title   map[string]bool // terms of the document title
		step    bool
		hasNum  bool
		hasUnit bool
	}
	want := quantityWanted(question)
	howTo := asksHow(question)
	titleTerms := map[string]map[string]bool{}
	for _, p := range passages {
		if titleTerms[p.title] == nil {
			titleTerms[p.title] = terms(p.title)
		}
	}
	var sents []candidate
	seen := map[string]bool{}
	for _, p := range passages {
		for _, s := range passageSentences(p.content) {
			// Questions (FAQ headings) and lead-ins to a list ("…计算：") answer nothing by themselves.
			if seen[s.text] || strings.HasSuffix(s.text, "？") || strings.HasSuffix(s.text, "?") || strings.HasSuffix(s.text, "：") || strings.HasSuffix(s.text, ":") {
				continue
			}
			seen[s.text] = true
			num, unit := want.match(s.text)
			// The document's title and the section heading say what a sentence is about.
			sents = append(sents, candidate{text: s.text, ref: p.ref, order: len(sents), terms: terms(s.text), context: terms(s.context), title: titleTerms[p.title], step: s.step, hasNum: num, hasUnit: unit})
		}
	}
	// Terms are weighted by how rare they are among the retrieved sentences, so the words that
	// distinguish the question ("写错") count more than the topic every result shares ("发票").
	// The order of the terms is fixed so that floating-point sums, and so the answer, are
	// deterministic.
	qList := make([]string, 0, len(qTerms))
	for t := range qTerms {
		qList = append(qList, t)
	}
	slices.Sort(qList)
	weight := make(map[string]float64, len(qTerms))
	total := 0.0
	for _, t := range qList {
		df := 0
		for _, s := range sents {
			if s.terms[t] {
				df++
			}
		}
		weight[t] = 1 + math.Log(float64(len(sents)+1)/float64(df+1))
		total += weight[t]
	}
	var cands []scored
	for _, s := range sents {
		hit, ctxHit, sum := 0, 0, 0.0
		for _, t := range qList {
			switch {
			case s.terms[t]:
				hit++
				sum += weight[t]
			case s.context[t]:
				// The heading says what the sentence is about ("## 自助重置密码" over "输入域账号…").
				ctxHit++
				sum += 0.5 * weight[t]
			case s.title[t]:
				// The title says so too, but for every sentence of the document alike.
				ctxHit++
				sum += 0.25 * weight[t]
			}
		}
		score := sum / total
		// One term of several is enough only when it is the question's distinctive one ("USB").
		if hit == 0 || (2*hit+ctxHit < 2*need && score < extractiveSingleTermScore) || score < extractiveMinScore {
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
		fig := 0
		if s.hasUnit {
			fig = 2
		} else if s.hasNum {
			fig = 1
		}
		cands = append(cands, scored{text: s.text, ref: s.ref, score: score, order: s.order, meta: isMetaSentence(s.text), figure: fig})
	}
	if len(cands) == 0 {
		return notFound
	}
	// Sentences about the document only serve when nothing else matched.
	if slices.ContainsFunc(cands, func(c scored) bool { return !c.meta }) {
		cands = slices.DeleteFunc(cands, func(c scored) bool { return c.meta })
	}
	// An amount question is answered by the sentences that give one, in the unit asked for if any do.
	if best := slices.MaxFunc(cands, func(a, b scored) int { return cmp.Compare(a.figure, b.figure) }).figure; best > 0 {
		cands = slices.DeleteFunc(cands, func(c scored) bool { return c.figure < best })
	}
	slices.SortStableFunc(cands, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	best := cands[0].score
	var picked []scored
	for _, c := range cands {
		if len(picked) == extractiveMaxSentences || c.score < best*0.6 {
			break
		}
		picked = append(picked, c)
	}
	// The answer reads in source order, like an excerpt, rather than by score.
	slices.SortFunc(picked, func(a, b scored) int { return cmp.Compare(a.order, b.order) })
	var b strings.Builder
	b.WriteString(pick(zh, "根据检索到的资料：\n\n", "Based on the retrieved sources:\n\n"))
	for i, c := range picked {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(c.text)
		b.WriteString("[^" + strconv.Itoa(c.ref) + "^]")
	}
	return b.String()
}

// sentence is one statement of a passage; context is the heading it stands under, whose terms
// count for a little when the sentence itself does not repeat them.
type sentence struct {
	text    string
	context string
	step    bool // from a numbered list item: a step of a procedure
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
				out = append(out, sentence{text: s, context: heading})
			}
			continue
		}
		header = nil
		line := cleanLine(raw)
		step := numberedItem.MatchString(raw)
		if line == "" {
			continue
		}
		if looksLikeHeading(line) {
			heading = line
			continue
		}
		start := 0
		rs := []rune(line)
		for i, r := range rs {
			end := false
			switch r {
			case '。', '！', '？', '；', '!', '?', ';':
				end = true
			case '.':
				end = i+1 == len(rs) || rs[i+1] == ' '
			}
			if end {
				out = appendSentence(out, sentence{text: string(rs[start : i+1]), context: heading, step: step})
				start = i + 1
			}
		}
		if start < len(rs) {
			out = appendSentence(out, sentence{text: string(rs[start:]), context: heading, step: step})
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
	zh := hasHan(heading + strings.Join(header, "") + strings.Join(cells, ""))
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

var numberedItem = regexp.MustCompile(`^\d{1,3}[.)、] ?`)

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

// Han characters that carry little meaning in a question; bigrams containing them are ignored.
const hanFunctionChars = "的了吗呢吧啊么是在和与或及我你他她它们这那哪个怎什几有能要可"

// zhQuestionPhrases only phrase a question; they are cut out before the question's terms are
// taken, so that they neither count as terms nor glue their neighbours into bigrams that occur
// nowhere ("订多", "久到").
var zhQuestionPhrases = strings.NewReplacer(
	"多长时间", " ", "多久", " ", "多少", " ", "多长", " ", "怎么办", " ", "怎么", " ", "怎样", " ", "如何", " ",
	"什么", " ", "是否", " ", "能不能", " ", "可不可以", " ", "可以吗", " ", "有没有", " ", "为什么", " ", "请问", " ",
)

var latinStopwords = map[string]bool{
	"the": true, "an": true, "is": true, "are": true, "was": true, "were": true, "be": true,
	"to": true, "of": true, "in": true, "on": true, "for": true, "and": true, "or": true,
	"how": true, "what": true, "when": true, "where": true, "which": true, "who": true, "why": true,
	"do": true, "does": true, "did": true, "can": true, "could": true, "should": true, "my": true,
	"me": true, "we": true, "our": true, "you": true, "your": true, "it": true, "its": true,
	"this": true, "that": true, "with": true, "about": true, "from": true, "by": true, "at": true,
	"as": true, "if": true, "there": true, "get": true, "please": true, "need": true, "have": true,
	"has": true, "will": true, "would": true, "any": true, "some": true, "into": true, "after": true,
	"use": true, "i": true, "am": true, "not": true, "much": true, "many": true, "long": true,
}

// terms returns the scoring terms of s: character bigrams of Han text (a lone Han character counts
// by itself) and lower-case Latin words, without function words and punctuation.
func terms(s string) map[string]bool {
	out := map[string]bool{}
	var han []rune
	var word []rune
	flushHan := func() {
		switch {
		case len(han) == 1:
			if !strings.ContainsRune(hanFunctionChars, han[0]) {
				out[string(han)] = true
			}
		case len(han) > 1:
			for i := 0; i+1 < len(han); i++ {
				if strings.ContainsRune(hanFunctionChars, han[i]) || strings.ContainsRune(hanFunctionChars, han[i+1]) {
					continue
				}
				out[string(han[i:i+2])] = true
			}
		}
		han = han[:0]
	}
	flushWord := func() {
		w := strings.ToLower(string(word))
		word = word[:0]
		if utf8.RuneCountInString(w) < 2 || latinStopwords[w] {
			return
		}
		// A crude plural fold, so "passwords" meets "password".
		if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
			w = w[:len(w)-1]
		}
		out[w] = true
	}
	for _, r := range s {
		switch {
		case unicode.Is(unicode.Han, r):
			flushWord()
			han = append(han, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			flushHan()
			word = append(word, r)
		default:
			flushHan()
			flushWord()
		}
	}
	flushHan()
	flushWord()
	return out
}

func hasHan(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
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
	durations := []string{"分钟", "小时", "天", "工作日", "周", "个月", "年", "minute", "hour", "day", "week", "month", "year"}
	for _, w := range []string{"多久", "多长时间", "多长", "how long", "what time", "几点", "when"} {
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
	ls := strings.ToLower(s)
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

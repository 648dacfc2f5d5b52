package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
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
	text  string
	ref   int
	score float64
	order int // result order, then sentence order: ties keep the search ranking
	meta  bool
}

// isMetaSentence reports sentences about the document rather than its subject ("本文说明…",
// "This guide explains…") and cross-references ("见《…》", "see the … guide"), which answer nothing.
func isMetaSentence(s string) bool {
	for _, p := range []string{"本文", "本指南", "本页", "本制度", "本规定", "本手册", "this article", "this guide", "this page", "this document"} {
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
	qTerms := terms(question)
	if len(qTerms) == 0 {
		return notFound
	}
	need := min(2, len(qTerms))

	type sentence struct {
		text  string
		ref   int
		order int
		terms map[string]bool
	}
	var sents []sentence
	seen := map[string]bool{}
	for _, p := range passages {
		for _, s := range splitSentences(p.content) {
			// Questions (FAQ headings) and lead-ins to a list ("…计算：") answer nothing by themselves.
			if seen[s] || strings.HasSuffix(s, "？") || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "：") || strings.HasSuffix(s, ":") {
				continue
			}
			seen[s] = true
			sents = append(sents, sentence{text: s, ref: p.ref, order: len(sents), terms: terms(s)})
		}
	}
	// Terms are weighted by how rare they are among the retrieved sentences, so the words that
	// distinguish the question ("写错") count more than the topic every result shares ("发票").
	weight := make(map[string]float64, len(qTerms))
	total := 0.0
	for t := range qTerms {
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
		hit, sum := 0, 0.0
		for t := range qTerms {
			if s.terms[t] {
				hit++
				sum += weight[t]
			}
		}
		score := sum / total
		if hit < need || score < extractiveMinScore {
			continue
		}
		cands = append(cands, scored{text: s.text, ref: s.ref, score: score, order: s.order, meta: isMetaSentence(s.text)})
	}
	if len(cands) == 0 {
		return notFound
	}
	// Sentences about the document only serve when nothing else matched.
	if slices.ContainsFunc(cands, func(c scored) bool { return !c.meta }) {
		cands = slices.DeleteFunc(cands, func(c scored) bool { return c.meta })
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

// splitSentences cuts a passage into sentences, CJK-aware: after 。！？；!?; and ". ", and at line
// breaks. Markdown decoration is removed so the sentences read as plain text.
func splitSentences(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue // a heading names a topic; it states nothing
		}
		line = cleanLine(line)
		if line == "" || looksLikeHeading(line) {
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
				out = appendSentence(out, string(rs[start:i+1]))
				start = i + 1
			}
		}
		if start < len(rs) {
			out = appendSentence(out, string(rs[start:]))
		}
	}
	return out
}

// looksLikeHeading reports a short line without sentence punctuation or figures, such as a section
// title ("年假天数") or a table header that search passages carry as plain lines.
func looksLikeHeading(line string) bool {
	if utf8.RuneCountInString(line) > 16 {
		return false
	}
	return !strings.ContainsAny(line, "。！？；，,.!?;：:0123456789")
}

func appendSentence(out []string, s string) []string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) < 4 {
		return out
	}
	return append(out, s)
}

// cleanLine strips Markdown decoration: headings, list bullets, emphasis, code ticks and table
// pipes (a table row becomes its cells joined by commas; separator rows vanish).
func cleanLine(line string) string {
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "|") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		var keep []string
		for _, c := range cells {
			c = strings.TrimSpace(c)
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
	line = strings.NewReplacer("**", "", "__", "", "`", "").Replace(line)
	return strings.TrimSpace(line)
}

// Han characters that carry little meaning in a question; bigrams containing them are ignored.
const hanFunctionChars = "的了吗呢吧啊么是在和与或及我你他她它们这那哪个怎什几有"

var latinStopwords = map[string]bool{
	"the": true, "an": true, "is": true, "are": true, "was": true, "were": true, "be": true,
	"to": true, "of": true, "in": true, "on": true, "for": true, "and": true, "or": true,
	"how": true, "what": true, "when": true, "where": true, "which": true, "who": true, "why": true,
	"do": true, "does": true, "did": true, "can": true, "could": true, "should": true, "my": true,
	"me": true, "we": true, "our": true, "you": true, "your": true, "it": true, "its": true,
	"this": true, "that": true, "with": true, "about": true, "from": true, "by": true, "at": true,
	"as": true, "if": true, "there": true, "get": true, "please": true, "need": true, "have": true,
	"has": true, "will": true, "would": true, "any": true, "some": true, "into": true, "after": true,
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

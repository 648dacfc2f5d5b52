package extractive

import (
	"strings"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/citegate/citegate/internal/textseg"
)

// analysedSentence is what scoring needs of one sentence of a passage that does not depend on the
// question: its text, heading, kind, their term sets and lower-case forms.
type analysedSentence struct {
	sentence
	meta     bool
	han      bool
	terms    map[string]bool
	lower    string
	ctxTerms map[string]bool
	ctxLow   string
}

// analysePassage splits a passage into the sentences that can answer something (questions such as
// FAQ headings and lead-ins to a list, "…计算：", answer nothing by themselves) and analyses each.
// The result is shared between runs and must not be modified.
func analysePassage(content string) []analysedSentence {
	var out []analysedSentence
	ctxTerms := map[string]map[string]bool{} // sentences under one heading share its terms
	ctxLow := map[string]string{}
	for _, s := range passageSentences(content) {
		if strings.HasSuffix(s.text, "？") || strings.HasSuffix(s.text, "?") || strings.HasSuffix(s.text, "：") || strings.HasSuffix(s.text, ":") {
			continue
		}
		ct, ok := ctxTerms[s.context]
		if !ok {
			ct = textseg.Terms(s.context)
			ctxTerms[s.context], ctxLow[s.context] = ct, strings.ToLower(s.context)
		}
		out = append(out, analysedSentence{
			sentence: s, meta: isMetaSentence(s.text), han: textseg.ReadsAsChinese(s.text),
			terms: textseg.Terms(s.text), lower: strings.ToLower(s.text), ctxTerms: ct, ctxLow: ctxLow[s.context],
		})
	}
	return out
}

// analysedTitle is a document title's terms and lower-case form.
type analysedTitle struct {
	terms map[string]bool
	lower string
}

func analyseTitle(title string) *analysedTitle {
	return &analysedTitle{terms: textseg.Terms(title), lower: strings.ToLower(title)}
}

// analysisMemo keeps the analysis of recently seen passages and titles. Analysing a passage is a
// pure function of its text, so this is what a model that indexed the corpus at load time would
// have, without the model knowing where its tool results come from (the local corpus, SearXNG,
// Tavily): search results repeat, because a corpus has only so many passages. It is bounded and
// safe for concurrent use; a nil memo analyses every time.
//
// It also keeps the reading of recent questions, which both rounds of a turn need, and of recent
// search results, which the model is handed as JSON text.
type analysisMemo struct {
	passages     *lru.Cache[string, []analysedSentence]
	titles       *lru.Cache[string, *analysedTitle]
	questions    *lru.Cache[string, *analysedQuestion]
	results      *lru.Cache[string, searchResult]
	hits, misses atomic.Uint64
}

// memoEntries bounds each cache: a passage's analysis is a few kilobytes. A search result holds
// several passages, so a quarter as many of them are kept.
const memoEntries = 1024

func newAnalysisMemo(entries int) *analysisMemo {
	p, err1 := lru.New[string, []analysedSentence](entries)
	t, err2 := lru.New[string, *analysedTitle](entries)
	q, err3 := lru.New[string, *analysedQuestion](entries)
	r, err4 := lru.New[string, searchResult](max(1, entries/4))
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return nil // only a non-positive size fails: no memo
	}
	return &analysisMemo{passages: p, titles: t, questions: q, results: r}
}

// analysedQuestion is a question's reading and the analysis of each of its parts.
type analysedQuestion struct {
	q     question
	parts []partAnalysis // parts[i] belongs to q.parts[i]
}

func analyseQuestion(text string) *analysedQuestion {
	q := parseQuestion(text)
	parts := make([]partAnalysis, len(q.parts))
	for i, p := range q.parts {
		parts[i] = analysePart(p)
	}
	return &analysedQuestion{q: q, parts: parts}
}

// question returns text's reading. It is shared between runs and must not be modified (the
// question struct may be copied and its copy changed).
func (m *analysisMemo) question(text string) *analysedQuestion {
	if m == nil {
		return analyseQuestion(text)
	}
	if a, ok := m.questions.Get(text); ok {
		return a
	}
	a := analyseQuestion(text)
	m.questions.Add(text, a)
	return a
}

// searchResult is parseSearchResult's reading of one web_search result.
type searchResult struct {
	passages []passage
	errMsg   string
}

// searchResult returns parseSearchResult(content). The passages are shared and must not be
// modified.
func (m *analysisMemo) searchResult(content string) ([]passage, string) {
	if m == nil {
		return parseSearchResult(content)
	}
	if r, ok := m.results.Get(content); ok {
		return r.passages, r.errMsg
	}
	ps, msg := parseSearchResult(content)
	m.results.Add(content, searchResult{ps, msg})
	return ps, msg
}

func (m *analysisMemo) passage(content string) []analysedSentence {
	if m == nil {
		return analysePassage(content)
	}
	if a, ok := m.passages.Get(content); ok {
		m.hits.Add(1)
		return a
	}
	m.misses.Add(1)
	a := analysePassage(content)
	m.passages.Add(content, a)
	return a
}

func (m *analysisMemo) title(title string) *analysedTitle {
	if m == nil {
		return analyseTitle(title)
	}
	if a, ok := m.titles.Get(title); ok {
		return a
	}
	a := analyseTitle(title)
	m.titles.Add(title, a)
	return a
}

// MemoStats reports how many passages the offline model m found already analysed (hits) and how
// many it analysed (misses) since it was made; ok is false for another model. Load tests report
// the hit rate beside their figures, since a memo that always hits would flatter them.
func MemoStats(m any) (hits, misses uint64, ok bool) {
	em, isExtractive := m.(*extractiveModel)
	if !isExtractive || em.memo == nil {
		return 0, 0, false
	}
	return em.memo.hits.Load(), em.memo.misses.Load(), true
}

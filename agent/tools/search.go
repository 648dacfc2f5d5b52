package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
)

// web_search limits.
const (
	DefaultMaxResults    = 5
	MaxMaxResults        = 10
	DefaultSearchTimeout = 20 * time.Second // a whole web_search call, provider included
	maxQueryRunes        = 400
	maxResultRunes       = 1000 // content of one provider result handed to the model
	// searchCacheEntries bounds web_search's cache of encoded results over a stableSearcher: one
	// entry is a few kilobytes.
	searchCacheEntries = 1024
)

// SearchResult is one hit of a Searcher.
type SearchResult struct {
	Title, URL, Content string
}

// Searcher runs a search. Implementations honour ctx and return at most max results; no results
// is not an error.
type Searcher interface {
	Search(ctx context.Context, query string, max int) ([]SearchResult, error)
}

// stableSearcher is a Searcher whose results for a query do not change while it is open: the
// local corpus, indexed once when it is loaded and never re-indexed. web_search keeps its encoded
// result per query for such a searcher (a knowledge base is asked the same questions again and
// again); web providers are asked every time, since the web changes.
type stableSearcher interface {
	Searcher
	// open reports whether Search still answers; a closed searcher's cached results are not used.
	open() bool
}

// NewWebSearch returns the web_search tool over s. log receives search failures; nil discards them.
func NewWebSearch(s Searcher, log *slog.Logger) agent.Tool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &webSearch{s: s, timeout: DefaultSearchTimeout, log: log}
	if st, ok := s.(stableSearcher); ok {
		w.stable = st
		w.cache, _ = lru.New[searchKey, string](searchCacheEntries) // only a size ≤ 0 fails
	}
	return w
}

type webSearch struct {
	s       Searcher
	timeout time.Duration
	log     *slog.Logger
	// stable is s when its results can be kept; cache then holds successful results by query.
	stable stableSearcher
	cache  *lru.Cache[searchKey, string]
}

// searchKey is a normalised query and the number of results asked for.
type searchKey struct {
	query string
	max   int
}

var webSearchParams = json.RawMessage(`{
  "type": "object",
  "properties": {
    "query": {"type": "string", "description": "搜索关键词或问题 / search query"},
    "max_results": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5, "description": "返回结果条数（默认 5，最多 10）"}
  },
  "required": ["query"],
  "additionalProperties": false
}`)

// Spec describes web_search to the model.
func (w *webSearch) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: citations.ToolWebSearch,
		Description: "搜索网页或企业知识库，返回相关结果的标题、链接和摘要，用于回答需要事实依据或最新信息的问题。" +
			"如需某条结果的全文，再用 open_web_page 打开其链接。" +
			"Search the web or the company knowledge base; returns title, url and a relevant excerpt per result. " +
			"引用本工具结果时，在句末使用 [^n^] 标记，n 为结果中的 ref 编号。",
		Parameters: webSearchParams,
	}
}

// webSearchOutput is the success shape of DESIGN §4.
type webSearchOutput struct {
	Query        string            `json:"query"`
	Results      []webSearchResult `json:"results"`
	TotalResults int               `json:"total_results"`
}

type webSearchResult struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Content string `json:"content"`
}

// Call runs a search. Bad arguments, timeouts and provider errors come back as {"error": "…"};
// the Go error is always nil.
func (w *webSearch) Call(ctx context.Context, arguments string) (string, error) {
	var args struct {
		Query      *string         `json:"query"`
		MaxResults json.RawMessage `json:"max_results"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(arguments)), &args); err != nil {
		return failure(`invalid arguments: expected a JSON object like {"query": "…"}`), nil
	}
	if args.Query == nil || strings.TrimSpace(*args.Query) == "" {
		return failure(`invalid arguments: "query" is required and must be a non-empty string`), nil
	}
	q := strings.Join(strings.Fields(*args.Query), " ")
	if utf8.RuneCountInString(q) > maxQueryRunes {
		q, _ = truncateRunes(q, maxQueryRunes)
	}
	max, err := parseMaxResults(args.MaxResults)
	if err != nil {
		return failure("invalid arguments: " + err.Error()), nil
	}

	key := searchKey{q, max}
	if w.cache != nil && w.stable.open() && ctx.Err() == nil {
		if out, ok := w.cache.Get(key); ok {
			return out, nil
		}
	}

	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	start := time.Now()
	results, err := w.search(ctx, q, max)
	if err != nil {
		msg := searchErrorMessage(ctx, err, time.Since(start))
		w.log.Warn("web_search failed", "err", err, "elapsed", time.Since(start))
		return failure(msg), nil
	}
	out := webSearchOutput{Query: q, Results: make([]webSearchResult, 0, len(results))}
	for _, r := range results {
		u := strings.TrimSpace(r.URL)
		if _, ok := citations.NormalizeURL(u); !ok {
			continue // a result the user could not open is no source
		}
		content, _ := truncateRunes(cleanText(r.Content), maxResultRunes)
		out.Results = append(out.Results, webSearchResult{Title: cleanText(r.Title), URL: u, Content: content})
		if len(out.Results) == max {
			break
		}
	}
	out.TotalResults = len(out.Results)
	enc := marshal(out)
	if w.cache != nil {
		// Only a successful search is kept: a timeout or a closed index says nothing of the next call.
		w.cache.Add(key, enc)
	}
	return enc, nil
}

// search calls the Searcher, turning a panic in it into an error so one broken provider cannot
// take down the agent loop.
func (w *webSearch) search(ctx context.Context, q string, max int) (res []SearchResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("search provider panicked: %v", p)
		}
	}()
	return w.s.Search(ctx, q, max)
}

func parseMaxResults(raw json.RawMessage) (int, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return DefaultMaxResults, nil
	}
	s = strings.Trim(s, `"`)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != float64(int(f)) {
		return 0, errors.New(`"max_results" must be an integer between 1 and 10`)
	}
	n := int(f)
	switch {
	case n < 1:
		return DefaultMaxResults, nil
	case n > MaxMaxResults:
		return MaxMaxResults, nil
	}
	return n, nil
}

// searchErrorMessage turns a provider error into a message the model can relay to the user.
func searchErrorMessage(ctx context.Context, err error, elapsed time.Duration) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return fmt.Sprintf("web search timed out after %s; try again later or rephrase the query", elapsed.Round(100*time.Millisecond))
	case errors.Is(err, context.Canceled):
		return "web search was cancelled"
	}
	return "web search failed: " + err.Error()
}

// failure renders web_search's failure shape {"error": msg}.
func failure(msg string) string {
	return marshal(struct {
		Error string `json:"error"`
	}{msg})
}

// pageFailure renders open_web_page's failure shape {"error": msg, "url": u}.
func pageFailure(msg, u string) string {
	return marshal(struct {
		Error string `json:"error"`
		URL   string `json:"url"`
	}{msg, u})
}

func marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings and numbers are marshalled here.
		return `{"error":"internal error: cannot encode the tool result"}`
	}
	return string(b)
}

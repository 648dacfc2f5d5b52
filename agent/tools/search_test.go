package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/citegate/citegate/citations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeObject parses a tool result and fails the test when it is not a JSON object.
func decodeObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m), "tool output %q", s)
	return m
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestWebSearchSpec(t *testing.T) {
	spec := NewWebSearch(loadSample(t), nil).Spec()
	assert.Equal(t, "web_search", spec.Name)
	assert.True(t, strings.HasSuffix(spec.Description, "引用本工具结果时，在句末使用 [^n^] 标记，n 为结果中的 ref 编号。"))
	var schema map[string]any
	require.NoError(t, json.Unmarshal(spec.Parameters, &schema))
	assert.Equal(t, []any{"query"}, schema["required"])
}

func TestWebSearchLocalSuccessShape(t *testing.T) {
	tool := NewWebSearch(loadSample(t), nil)
	out, err := tool.Call(context.Background(), `{"query":"电子发票抬头写错了怎么办？","max_results":3}`)
	require.NoError(t, err)
	m := decodeObject(t, out)
	assert.ElementsMatch(t, []string{"query", "results", "total_results"}, keys(m))
	assert.Equal(t, "电子发票抬头写错了怎么办？", m["query"])
	results := m["results"].([]any)
	require.Len(t, results, 3)
	assert.EqualValues(t, 3, m["total_results"])
	first := results[0].(map[string]any)
	assert.ElementsMatch(t, []string{"title", "url", "content"}, keys(first))
	assert.Equal(t, testPublicURL+"/kb/einvoice-title-correction", first["url"])
	assert.Contains(t, first["content"], "红冲")

	// The registry the agent loop builds from this result numbers every result.
	reg := citations.BuildRegistry([]citations.ToolResult{{Tool: "web_search", Content: out}})
	assert.Equal(t, 3, reg.Len())
}

func TestWebSearchArguments(t *testing.T) {
	tool := NewWebSearch(loadSample(t), nil)
	tests := []struct {
		name, args, wantErr string
		wantCount           int
	}{
		{"not json", `query=发票`, "invalid arguments", 0},
		{"array", `["发票"]`, "invalid arguments", 0},
		{"missing query", `{}`, `"query" is required`, 0},
		{"blank query", `{"query":"  "}`, `"query" is required`, 0},
		{"query not string", `{"query":42}`, "invalid arguments", 0},
		{"max not integer", `{"query":"发票","max_results":"many"}`, `"max_results" must be an integer`, 0},
		{"max fraction", `{"query":"发票","max_results":2.5}`, `"max_results" must be an integer`, 0},
		{"default max", `{"query":"发票 报销 申请 公司"}`, "", 5},
		{"max clamped", `{"query":"发票 报销 申请 公司 IT VPN Wi-Fi data","max_results":50}`, "", 10},
		{"max as string", `{"query":"发票","max_results":"2"}`, "", 2},
		{"max zero means default", `{"query":"发票 报销 申请 公司","max_results":0}`, "", 5},
		{"null max", `{"query":"发票","max_results":null,"extra":true}`, "", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tool.Call(context.Background(), tc.args)
			require.NoError(t, err)
			m := decodeObject(t, out)
			if tc.wantErr != "" {
				assert.Equal(t, []string{"error"}, keys(m))
				assert.Contains(t, m["error"], tc.wantErr)
				return
			}
			require.NotContains(t, m, "error")
			if tc.name == "null max" {
				assert.GreaterOrEqual(t, len(m["results"].([]any)), 1)
				return
			}
			assert.Len(t, m["results"].([]any), tc.wantCount)
		})
	}
}

// fakeSearcher is a Searcher with canned behaviour.
type fakeSearcher struct {
	results []SearchResult
	err     error
	panics  bool
}

func (f fakeSearcher) Search(ctx context.Context, q string, max int) ([]SearchResult, error) {
	if f.panics {
		panic("boom")
	}
	return f.results, f.err
}

func TestWebSearchFiltersAndFailures(t *testing.T) {
	t.Run("drops results without a usable URL", func(t *testing.T) {
		out, err := NewWebSearch(fakeSearcher{results: []SearchResult{
			{Title: "ok", URL: "https://example.com/a", Content: "a"},
			{Title: "no url", URL: "", Content: "b"},
			{Title: "js", URL: "javascript:alert(1)", Content: "c"},
			{Title: "relative", URL: "/x", Content: "d"},
			{Title: " spaced ", URL: " http://example.com/b ", Content: "bad \xff byte"},
		}}, nil).Call(context.Background(), `{"query":"x"}`)
		require.NoError(t, err)
		m := decodeObject(t, out)
		assert.EqualValues(t, 2, m["total_results"])
		second := m["results"].([]any)[1].(map[string]any)
		assert.Equal(t, "http://example.com/b", second["url"])
		assert.Equal(t, "spaced", second["title"])
		assert.Equal(t, "bad \uFFFD byte", second["content"])
	})
	t.Run("empty results are a success", func(t *testing.T) {
		out, err := NewWebSearch(fakeSearcher{}, nil).Call(context.Background(), `{"query":"x"}`)
		require.NoError(t, err)
		assert.JSONEq(t, `{"query":"x","results":[],"total_results":0}`, out)
	})
	t.Run("provider error", func(t *testing.T) {
		out, err := NewWebSearch(fakeSearcher{err: errors.New("searxng: HTTP 502 Bad Gateway")}, nil).Call(context.Background(), `{"query":"x"}`)
		require.NoError(t, err)
		assert.JSONEq(t, `{"error":"web search failed: searxng: HTTP 502 Bad Gateway"}`, out)
	})
	t.Run("panic is contained", func(t *testing.T) {
		out, err := NewWebSearch(fakeSearcher{panics: true}, nil).Call(context.Background(), `{"query":"x"}`)
		require.NoError(t, err)
		assert.Contains(t, decodeObject(t, out)["error"], "panicked")
	})
}

// countingSearcher counts the searches that reach s; open, when set, makes it a stableSearcher.
type countingSearcher struct {
	s     Searcher
	calls atomic.Int64
}

func (c *countingSearcher) Search(ctx context.Context, q string, max int) ([]SearchResult, error) {
	c.calls.Add(1)
	return c.s.Search(ctx, q, max)
}

type countingStable struct {
	countingSearcher
	corpus *Corpus
}

func (c *countingStable) open() bool { return c.corpus.open() }

// TestWebSearchCorpusCache: over the local corpus, web_search answers a query it answered before
// from its cache, with the same bytes a search would give (the uncached tool is the oracle); another
// query, another max_results, a closed corpus or a web provider are searched.
func TestWebSearchCorpusCache(t *testing.T) {
	c := load(t, "", testPublicURL)
	counted := &countingStable{countingSearcher: countingSearcher{s: c}, corpus: c}
	cached := NewWebSearch(counted, nil)
	oracle := NewWebSearch(&countingSearcher{s: c}, nil) // not a stableSearcher: never cached
	ctx := context.Background()
	args := []string{
		`{"query":"电子发票抬头写错了怎么办？"}`, `{"query":"  电子发票抬头写错了怎么办？ "}`, `{"query":"电子发票抬头写错了怎么办？","max_results":2}`,
		`{"query":"How do I reset my password?"}`, `{"query":"How   do I reset\nmy password?"}`, `{"query":"报销多久能到账？","max_results":10}`,
		`{"query":"no such thing at all zzzz"}`,
	}
	for round := range 3 {
		for _, a := range args {
			want, err := oracle.Call(ctx, a)
			require.NoError(t, err)
			got, err := cached.Call(ctx, a)
			require.NoError(t, err)
			assert.Equal(t, want, got, "round %d, %s", round, a)
		}
	}
	// Seven argument sets, five distinct (query, max) pairs after whitespace is normalised.
	assert.EqualValues(t, 5, counted.calls.Load())

	// Bad arguments are answered before the cache.
	out, err := cached.Call(ctx, `{"query":""}`)
	require.NoError(t, err)
	assert.Contains(t, out, `"error"`)

	// A closed corpus fails, whatever was cached.
	require.NoError(t, c.Close())
	out, err = cached.Call(ctx, args[0])
	require.NoError(t, err)
	assert.Contains(t, decodeObject(t, out)["error"], "web search failed")
	assert.EqualValues(t, 6, counted.calls.Load())

	// A web provider is asked every time.
	web := &countingSearcher{s: fakeSearcher{results: []SearchResult{{Title: "t", URL: "https://example.com/a", Content: "c"}}}}
	ws := NewWebSearch(web, nil)
	for range 3 {
		_, err := ws.Call(ctx, `{"query":"x"}`)
		require.NoError(t, err)
	}
	assert.EqualValues(t, 3, web.calls.Load())
}

// TestWebSearchCorpusCacheCancelled: a call whose context is already over is not answered from the
// cache; it fails as a search would.
func TestWebSearchCorpusCacheCancelled(t *testing.T) {
	c := loadSample(t)
	counted := &countingStable{countingSearcher: countingSearcher{s: c}, corpus: c}
	ws := NewWebSearch(counted, nil)
	_, err := ws.Call(context.Background(), `{"query":"年假"}`)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = ws.Call(ctx, `{"query":"年假"}`)
	require.NoError(t, err)
	assert.EqualValues(t, 2, counted.calls.Load())
}

func searxngJSON(results ...map[string]string) string {
	rs := make([]map[string]any, 0, len(results))
	for _, r := range results {
		rs = append(rs, map[string]any{"title": r["title"], "url": r["url"], "content": r["content"], "engine": "bing", "score": 1.5})
	}
	b, _ := json.Marshal(map[string]any{"query": "q", "number_of_results": 0, "results": rs, "answers": []any{}, "suggestions": []any{}})
	return string(b)
}

func TestSearXNG(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr string
		want    int
	}{
		{"success", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/searx/search" || r.URL.Query().Get("format") != "json" || r.URL.Query().Get("q") != "发票 抬头" {
				http.Error(w, "bad request "+r.URL.String(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, searxngJSON(
				map[string]string{"title": "红字发票", "url": "https://tax.example.cn/a", "content": "开具红字发票"},
				map[string]string{"title": "抬头", "url": "https://tax.example.cn/b", "content": "抬头错误"},
				map[string]string{"title": "third", "url": "https://tax.example.cn/c", "content": "c"},
			))
		}, "", 2},
		{"empty", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, searxngJSON()) }, "", 0},
		{"500", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "engine crashed", http.StatusInternalServerError)
		}, "searxng: HTTP 500 Internal Server Error: engine crashed", 0},
		{"403 json disabled", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusForbidden)
		}, "enable the json format", 0},
		{"bad json", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>search page</html>") }, "not valid JSON", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			s := &SearXNG{BaseURL: srv.URL + "/searx/", Client: srv.Client()}
			res, err := s.Search(context.Background(), "发票 抬头", 2)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Len(t, res, tc.want)
			if tc.want > 0 {
				assert.Equal(t, SearchResult{Title: "红字发票", URL: "https://tax.example.cn/a", Content: "开具红字发票"}, res[0])
			}
		})
	}
	_, err := (&SearXNG{}).Search(context.Background(), "x", 1)
	require.Error(t, err)
}

func TestTavily(t *testing.T) {
	const key = "tvly-SECRET-123"
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr string
		want    int
	}{
		{"success", func(w http.ResponseWriter, r *http.Request) {
			var body map[string]any
			if r.Method != http.MethodPost || r.URL.Path != "/search" || r.Header.Get("Authorization") != "Bearer "+key ||
				json.NewDecoder(r.Body).Decode(&body) != nil || body["query"] != "vpn" || body["max_results"] != 3.0 {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"detail":{"error":"bad request"}}`)
				return
			}
			io.WriteString(w, `{"query":"vpn","answer":null,"images":[],"results":[
				{"title":"VPN guide","url":"https://docs.example.com/vpn","content":"Connect with MFA","score":0.9,"raw_content":null},
				{"title":"VPN FAQ","url":"https://docs.example.com/faq","content":"FAQ","score":0.5,"raw_content":null}],"response_time":0.8}`)
		}, "", 2},
		{"empty", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"query":"vpn","results":[]}`) }, "", 0},
		{"unauthorized", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"detail":{"error":"Unauthorized: missing or invalid API key `+key+`"}}`)
		}, "tavily: HTTP 401 Unauthorized", 0},
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }, "HTTP 500", 0},
		{"bad json", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"results": [`) }, "not valid JSON", 0},
		{"no results field", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"query":"vpn"}`) }, "no results field", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			s := &Tavily{APIKey: key, BaseURL: srv.URL, Client: srv.Client()}
			res, err := s.Search(context.Background(), "vpn", 3)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.NotContains(t, err.Error(), key, "the API key never appears in errors")
				return
			}
			require.NoError(t, err)
			require.Len(t, res, tc.want)
			if tc.want > 0 {
				assert.Equal(t, "https://docs.example.com/vpn", res[0].URL)
			}
		})
	}
	_, err := (&Tavily{}).Search(context.Background(), "x", 1)
	require.ErrorContains(t, err, "no API key")
}

// TestProviderTimeoutFailureShape checks that a hanging provider turns into the failure shape
// well within the tool's deadline.
func TestProviderTimeoutFailureShape(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	for _, s := range []Searcher{
		&SearXNG{BaseURL: srv.URL},
		&Tavily{APIKey: "k", BaseURL: srv.URL},
	} {
		tool := NewWebSearch(s, nil).(*webSearch)
		tool.timeout = 300 * time.Millisecond
		start := time.Now()
		out, err := tool.Call(context.Background(), `{"query":"slow"}`)
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 20*time.Second, "the timeout ended the call (the server never answers)")
		m := decodeObject(t, out)
		assert.Equal(t, []string{"error"}, keys(m))
		assert.Contains(t, m["error"], "timed out")

		// The caller's own deadline is honoured too.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		out, err = NewWebSearch(s, nil).Call(ctx, `{"query":"slow"}`)
		cancel()
		require.NoError(t, err)
		assert.Contains(t, decodeObject(t, out)["error"], "timed out")
	}
}

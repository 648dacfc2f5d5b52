package citations

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ws(results ...string) string {
	return `{"query":"q","results":[` + strings.Join(results, ",") + `],"total_results":` + fmt.Sprint(len(results)) + `}`
}

func item(title, url string) string {
	b, _ := json.Marshal(map[string]string{"title": title, "url": url, "content": "excerpt of " + title})
	return string(b)
}

func page(title, url string) string {
	b, _ := json.Marshal(map[string]any{"url": url, "title": title, "content": "body of " + title, "content_length": 10, "truncated": false})
	return string(b)
}

func urls(r *Registry) []string {
	var out []string
	for _, s := range r.Sources() {
		out = append(out, s.URL)
	}
	return out
}

func TestBuildRegistry(t *testing.T) {
	tests := []struct {
		name    string
		results []ToolResult
		want    []string
	}{
		{"no tool results", nil, nil},
		{"web_search results in order", []ToolResult{
			{Tool: ToolWebSearch, Content: ws(item("A", "https://a.example/1"), item("B", "http://b.example/2"))},
		}, []string{"https://a.example/1", "http://b.example/2"}},
		{"empty url skipped", []ToolResult{
			{Tool: ToolWebSearch, Content: ws(item("A", ""), item("B", "https://b.example/"))},
		}, []string{"https://b.example/"}},
		{"web_search failure shape skipped", []ToolResult{
			{Tool: ToolWebSearch, Content: `{"error":"timeout","results":[{"url":"https://x.example/"}]}`},
		}, nil},
		{"open_web_page success", []ToolResult{
			{Tool: ToolOpenWebPage, Content: page("P", "https://p.example/a")},
		}, []string{"https://p.example/a"}},
		{"open_web_page truncated still counts", []ToolResult{
			{Tool: ToolOpenWebPage, Content: `{"url":"https://p.example/t","title":"T","content":"x","content_length":99999,"truncated":true}`},
		}, []string{"https://p.example/t"}},
		{"open_web_page failure shape skipped", []ToolResult{
			{Tool: ToolOpenWebPage, Content: `{"error":"403","url":"https://p.example/denied"}`},
		}, nil},
		{"open_web_page content not a string", []ToolResult{
			{Tool: ToolOpenWebPage, Content: `{"url":"https://p.example/n","title":"N","content":42}`},
		}, nil},
		{"mixed tools interleaved keep message order", []ToolResult{
			{Tool: ToolWebSearch, Content: ws(item("A", "https://a.example/"))},
			{Tool: ToolOpenWebPage, Content: page("P", "https://p.example/")},
			{Tool: ToolWebSearch, Content: ws(item("B", "https://b.example/"))},
		}, []string{"https://a.example/", "https://p.example/", "https://b.example/"}},
		{"dedup by url keeps first", []ToolResult{
			{Tool: ToolWebSearch, Content: ws(item("A", "https://a.example/"), item("A again", "https://a.example/"))},
			{Tool: ToolOpenWebPage, Content: page("A page", "https://a.example/")},
		}, []string{"https://a.example/"}},
		{"other tools never count", []ToolResult{
			{Tool: "generate_image", Content: ws(item("I", "https://img.example/"))},
			{Tool: "mcp_fetch", Content: page("M", "https://m.example/")},
		}, nil},
		{"non JSON skipped", []ToolResult{
			{Tool: ToolWebSearch, Content: "not json at all"},
			{Tool: ToolOpenWebPage, Content: "<html>"},
			{Tool: ToolWebSearch, Content: string([]byte{0xff, 0xfe, '{'})},
		}, nil},
		{"JSON of another shape skipped", []ToolResult{
			{Tool: ToolWebSearch, Content: `{"results":"nope"}`},
			{Tool: ToolWebSearch, Content: `[1,2,3]`},
			{Tool: ToolWebSearch, Content: `{"results":[1,"x",null,{"url":7}]}`},
			{Tool: ToolOpenWebPage, Content: `null`},
		}, nil},
		{"only http(s)", []ToolResult{
			{Tool: ToolWebSearch, Content: ws(item("js", "javascript:alert(1)"), item("data", "data:text/html,<b>x</b>"),
				item("ftp", "ftp://f.example/"), item("rel", "/kb/x"), item("ok", "HTTPS://ok.example/"))},
		}, []string{"HTTPS://ok.example/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := BuildRegistry(tt.results)
			assert.Equal(t, tt.want, urls(r))
			for i, s := range r.Sources() {
				assert.Equal(t, i+1, s.N)
			}
		})
	}
}

func TestRegistryCap(t *testing.T) {
	var items []string
	for i := range 25 {
		items = append(items, item(fmt.Sprint("T", i), fmt.Sprintf("https://s.example/%d", i)))
	}
	r := BuildRegistry([]ToolResult{{Tool: ToolWebSearch, Content: ws(items...)}})
	require.Equal(t, MaxSources, r.Len())
	assert.Equal(t, 5, r.Overflow)
	assert.Equal(t, "https://s.example/19", r.Sources()[19].URL)
}

func TestAddAnnotatesRefsAndIsIdempotent(t *testing.T) {
	var items []string
	for i := range 22 {
		items = append(items, item(fmt.Sprint("T", i), fmt.Sprintf("https://s.example/%d", i%21)))
	}
	var r Registry
	annotated := r.Add(ToolResult{Tool: ToolWebSearch, Content: ws(items...)})
	var got struct {
		Results []struct {
			URL string `json:"url"`
			Ref *int   `json:"ref"`
		} `json:"results"`
		TotalResults int `json:"total_results"`
	}
	require.NoError(t, json.Unmarshal([]byte(annotated), &got))
	require.Len(t, got.Results, 22)
	assert.Equal(t, 22, got.TotalResults, "other fields survive annotation")
	for i, res := range got.Results[:20] {
		require.NotNil(t, res.Ref)
		assert.Equal(t, i+1, *res.Ref)
	}
	assert.Nil(t, got.Results[20].Ref, "past the cap: no number")
	require.NotNil(t, got.Results[21].Ref, "a duplicate URL shows the first number")
	assert.Equal(t, 1, *got.Results[21].Ref)

	// The hook rebuilds from the stored (annotated) content: same registry.
	again := BuildRegistry([]ToolResult{{Tool: ToolWebSearch, Content: annotated}})
	assert.Equal(t, urls(&r), urls(again))
	var r2 Registry
	assert.JSONEq(t, annotated, r2.Add(ToolResult{Tool: ToolWebSearch, Content: annotated}))

	// A page result gets its number too; failure shapes come back unchanged.
	p := r.Add(ToolResult{Tool: ToolOpenWebPage, Content: page("S3", "https://s.example/3")})
	assert.Contains(t, p, `"ref":4`)
	failure := `{"error":"boom","url":"https://x.example/"}`
	assert.Equal(t, failure, r.Add(ToolResult{Tool: ToolOpenWebPage, Content: failure}))
}

func TestVerify(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	reg := BuildRegistry([]ToolResult{
		{Tool: ToolWebSearch, At: at, Content: ws(item("One", "https://1.example/"), item("Two", "https://2.example/"), item("Three", "https://3.example/"))},
		{Tool: ToolOpenWebPage, At: at, Content: page("Four", "https://4.example/")},
		{Tool: ToolOpenWebPage, At: at, Content: page("Five", "https://5.example/")},
	})
	require.Equal(t, 5, reg.Len())
	tests := []struct {
		name    string
		content string
		want    []int
		seen    int
		kept    int
	}{
		{"none", "没有引用。", nil, 0, 0},
		{"all out of range", "X[^6^][^0^][^99^]", nil, 3, 0},
		{"some out of range", "A[^2^]B[^9^]", []int{2}, 2, 1},
		{"duplicates once", "A[^3^]B[^3^]C[^3^]", []int{3}, 3, 3},
		{"ordered by n", "A[^5^]B[^1^]C[^2^]", []int{1, 2, 5}, 3, 3},
		{"forged number beyond registry", "伪造[^21^]", nil, 1, 0},
		{"marker in code is literal text", "`[^4^]`", nil, 0, 0},
		{"marker beside code counts", "`x` [^4^] ```[^2^]```", []int{4}, 1, 1},
		{"digits beyond bound are text", "X[^" + strings.Repeat("1", 30) + "^]", nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Verify(tt.content, reg)
			var ns []int
			for _, c := range v.Citations {
				ns = append(ns, c.N)
				src, _ := reg.Lookup(c.N)
				assert.Equal(t, src.URL, c.URL)
				assert.Equal(t, src.Title, c.Title)
				assert.Equal(t, Digest(src.Excerpt), c.Digest)
				require.NotNil(t, c.RetrievedAt)
				assert.True(t, c.RetrievedAt.Equal(at))
			}
			assert.Equal(t, tt.want, ns)
			assert.Equal(t, tt.seen, v.Seen)
			assert.Equal(t, tt.kept, v.Kept)
			assert.Equal(t, tt.seen-tt.kept, v.Dropped)
		})
	}
	// An empty registry (no tool results, or a session without USER message) verifies nothing.
	assert.Empty(t, Verify("A[^1^]", &Registry{}).Citations)
}

func TestCitationJSONShape(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	b, err := json.Marshal(Citation{N: 3, URL: "https://gov.example.cn/policy", Title: "2026 年度申报指南", Tool: ToolWebSearch, RetrievedAt: &at, Digest: "sha256:ab"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"n":3,"url":"https://gov.example.cn/policy","title":"2026 年度申报指南","tool":"web_search","retrievedAt":"2026-11-30T08:00:00Z","digest":"sha256:ab"}`, string(b))
}

func TestDisplayNumbers(t *testing.T) {
	m := DisplayNumbers([]Citation{{N: 5}, {N: 2}})
	assert.Equal(t, map[int]int{2: 1, 5: 2}, m)
	assert.Empty(t, DisplayNumbers(nil))
}

func TestFromMetadata(t *testing.T) {
	tests := []struct {
		name string
		meta string
		want []int
	}{
		{"empty", ``, nil},
		{"null", `null`, nil},
		{"not JSON", `{citations`, nil},
		{"no key", `{"other":1}`, nil},
		{"citations not array", `{"citations":"x"}`, nil},
		{"valid", `{"citations":[{"n":5,"url":"https://e.example/5","title":"T5"},{"n":2,"url":"https://e.example/2","title":"T2"}]}`, []int{2, 5}},
		{"bad entries skipped", `{"citations":[{"n":0,"url":"https://e.example/"},{"n":-1,"url":"https://e.example/"},{"n":"1","url":"https://e.example/"},{"n":3,"url":"javascript:alert(1)"},{"n":4,"url":"data:text/html,x"},{"n":6,"url":"https://ok.example/"},{"n":6,"url":"https://dup.example/"},7]}`, []int{6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ns []int
			for _, c := range FromMetadata([]byte(tt.meta)) {
				ns = append(ns, c.N)
			}
			assert.Equal(t, tt.want, ns)
		})
	}
}

func TestTitleCleanup(t *testing.T) {
	reg := BuildRegistry([]ToolResult{{Tool: ToolWebSearch, Content: ws(item("  <b>Bold</b>\n title  ", "https://t.example/"))}})
	// HTML stays text (renderers escape it); whitespace is collapsed.
	assert.Equal(t, "<b>Bold</b> title", reg.Sources()[0].Title)
}

func TestOpenWebPageNullContentIsNoSource(t *testing.T) {
	for _, content := range []string{
		`{"url":"https://p.example/n","title":"N","content":null}`,
		`{"url":"https://p.example/n","title":"N","content":{"text":"x"}}`,
		`{"url":"https://p.example/n","title":"N"}`,
		`{"url":"https://p.example/n","title":"N","content":"x","content":null}`, // the last duplicate counts
	} {
		r := &Registry{}
		assert.Equal(t, content, r.Add(ToolResult{Tool: ToolOpenWebPage, Content: content}), "unchanged")
		assert.Zero(t, r.Len(), content)
	}
}

func TestAddSplicesRefIntoOriginalBytes(t *testing.T) {
	r := &Registry{}
	in := `{"query":"q", "results":[ {"title":"A <b>", "url":"https://a.example/?x=1&y=2", "content":"\u00e9 \ud83d\ude00"} , 7, {"url":"ftp://x"} ],"total_results":2}`
	out := r.Add(ToolResult{Tool: ToolWebSearch, Content: in})
	// Only the splice changed: spacing, key order and escapes stay as the tool wrote them.
	assert.Equal(t, `{"query":"q", "results":[ {"title":"A <b>", "url":"https://a.example/?x=1&y=2", "content":"\u00e9 \ud83d\ude00","ref":1} , 7, {"url":"ftp://x"} ],"total_results":2}`, out)
	src, ok := r.Lookup(1)
	require.True(t, ok)
	assert.Equal(t, "é 😀", src.Excerpt)

	// A ref the tool (or a page) wrote is replaced by the registry's, or taken out when the source
	// has no number; duplicates go too.
	r2 := &Registry{}
	out = r2.Add(ToolResult{Tool: ToolWebSearch, Content: `{"results":[{"ref":9,"url":"https://b.example/","ref":"x"},{"url":"","ref":3}]}`})
	assert.Equal(t, `{"results":[{"url":"https://b.example/","ref":1},{"url":""}]}`, out)
	out = r2.Add(ToolResult{Tool: ToolOpenWebPage, Content: ` {"url":"https://c.example/","content":"c","ref":1} `})
	assert.Equal(t, ` {"url":"https://c.example/","content":"c","ref":2} `, out)
}

// oracleAdd is the registry's earlier implementation on encoding/json, kept as the reference the
// single-pass scanner must agree with: the same sources, and annotated content that decodes to the
// same JSON value.
func oracleAdd(r *Registry, res ToolResult) string {
	decode := func(s string, v *map[string]json.RawMessage) bool {
		return json.Unmarshal([]byte(s), v) == nil && *v != nil
	}
	str := func(raw json.RawMessage) string {
		var s string
		if raw == nil || json.Unmarshal(raw, &s) != nil {
			return ""
		}
		return s
	}
	set := func(obj map[string]json.RawMessage, n int) {
		delete(obj, "ref")
		if n > 0 {
			obj["ref"], _ = json.Marshal(n)
		}
	}
	var top map[string]json.RawMessage
	if (res.Tool != ToolWebSearch && res.Tool != ToolOpenWebPage) || !decode(res.Content, &top) {
		return res.Content
	}
	if _, failed := top["error"]; failed {
		return res.Content
	}
	if res.Tool == ToolOpenWebPage {
		var content *string
		if json.Unmarshal(top["content"], &content) != nil || content == nil {
			return res.Content
		}
		set(top, r.add(Source{URL: str(top["url"]), Title: str(top["title"]), Tool: res.Tool, Excerpt: *content}, nil))
		b, _ := json.Marshal(top)
		return string(b)
	}
	var items []json.RawMessage
	if json.Unmarshal(top["results"], &items) != nil || top["results"][0] != '[' {
		return res.Content
	}
	for i, raw := range items {
		var item map[string]json.RawMessage
		if json.Unmarshal(raw, &item) != nil || item == nil {
			continue
		}
		set(item, r.add(Source{URL: str(item["url"]), Title: str(item["title"]), Tool: res.Tool, Excerpt: str(item["content"])}, nil))
		items[i], _ = json.Marshal(item)
	}
	top["results"], _ = json.Marshal(items)
	b, _ := json.Marshal(top)
	return string(b)
}

func FuzzRegistryAdd(f *testing.F) {
	f.Add(ToolWebSearch, ws(item("A", "https://a.example/1"), item("B", "http://b.example/2")))
	f.Add(ToolWebSearch, `{"results":[{"ref":9,"url":"https://b.example/","ref":"x"},{"url":"","ref":3}], "results":[{"url":"https://c.example/\u0041"}]}`)
	f.Add(ToolWebSearch, `{"error":null,"results":[{"url":"https://x.example/"}]}`)
	f.Add(ToolWebSearch, `{"results":[{"url":"https://x.example/","title":"\ud800\u00e9\xff"}]} `)
	f.Add(ToolWebSearch, `{"results":[{"url":"https://x.example/","content":"a\"b\\"}],"n":-1.5e+3,"t":[true,false,null,{}]}`)
	f.Add(ToolOpenWebPage, page("P", "https://p.example/a"))
	f.Add(ToolOpenWebPage, `{"url":"https://p.example/n","content":null}`)
	f.Add(ToolOpenWebPage, `{"url":"https://p.example/n","content":"x","ref":1}`)
	f.Add(ToolOpenWebPage, `{"url":"https://p.example/n","content":"x",}`)
	f.Fuzz(func(t *testing.T, tool, content string) {
		if tool != ToolWebSearch && tool != ToolOpenWebPage {
			tool = ToolWebSearch
		}
		var fast, slow Registry
		got := fast.Add(ToolResult{Tool: tool, Content: content})
		want := oracleAdd(&slow, ToolResult{Tool: tool, Content: content})
		require.Equal(t, len(slow.Sources()), len(fast.Sources()), "sources of %q", content)
		for i, s := range slow.Sources() {
			g := fast.Sources()[i]
			require.Equal(t, [3]string{s.URL, s.Title, s.Excerpt}, [3]string{g.URL, g.Title, g.Excerpt}, "source %d of %q", i, content)
		}
		if want == content {
			require.Equal(t, content, got, "unchanged")
			return
		}
		var a, b any
		require.NoError(t, json.Unmarshal([]byte(want), &a))
		require.NoError(t, json.Unmarshal([]byte(got), &b), "annotated content %q is JSON", got)
		require.Equal(t, a, b, "annotated %q", content)
		// Reading the annotated content again changes nothing (preview and tests rebuild the
		// registry from stored results).
		var again Registry
		require.Equal(t, got, again.Add(ToolResult{Tool: tool, Content: got}))
	})
}

// benchResults are 4 web_search results of 10 sources each, ~1 KiB per source (DESIGN §4's case
// of issue 8: 40 results), and benchAnswer an 8 KiB answer citing them.
func benchResults() ([]string, string) {
	var out []string
	for c := range 4 {
		var items []string
		for i := range 10 {
			b, _ := json.Marshal(map[string]string{
				"title":   fmt.Sprintf("差旅报销制度 第 %d 节", c*10+i),
				"url":     fmt.Sprintf("https://kb.example.com/kb/doc-%d-%d", c, i),
				"content": strings.Repeat("员工出差住宿标准按城市分类执行，超标部分自理。", 16),
			})
			items = append(items, string(b))
		}
		out = append(out, ws(items...))
	}
	var answer strings.Builder
	for i := 0; answer.Len() < 8<<10; i++ {
		fmt.Fprintf(&answer, "住宿标准按城市分类执行，超标部分自理。[^%d^]\n", i%25+1)
	}
	return out, answer.String()
}

// BenchmarkRegistryVerify: the citation work of one run — registry built from 40 web_search
// results as they arrive (with the "ref" annotation the model gets) and the 8 KiB answer verified.
func BenchmarkRegistryVerify(b *testing.B) {
	results, answer := benchResults()
	b.ReportAllocs()
	loopCPU(b, func() {
		var r Registry
		for _, c := range results {
			_ = r.Add(ToolResult{Tool: ToolWebSearch, Content: c})
		}
		if v := Verify(answer, &r); len(v.Citations) != 20 {
			b.Fatalf("%d citations", len(v.Citations))
		}
	})
}

// BenchmarkDecodeResultsBaseline is the floor the issue compares with: json-decoding the same 40
// results once into typed structs, nothing else.
func BenchmarkDecodeResultsBaseline(b *testing.B) {
	results, _ := benchResults()
	b.ReportAllocs()
	loopCPU(b, func() {
		for _, c := range results {
			var v struct {
				Results []struct{ Title, URL, Content string } `json:"results"`
			}
			if err := json.Unmarshal([]byte(c), &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRegistryVerifyEncodingJSON is the same work done the earlier way (oracleAdd: decode
// into maps, re-encode every result), for the before/after ratio in the same run.
func BenchmarkRegistryVerifyEncodingJSON(b *testing.B) {
	results, answer := benchResults()
	b.ReportAllocs()
	loopCPU(b, func() {
		var r Registry
		for _, c := range results {
			_ = oracleAdd(&r, ToolResult{Tool: ToolWebSearch, Content: c})
		}
		if v := Verify(answer, &r); len(v.Citations) != 20 {
			b.Fatalf("%d citations", len(v.Citations))
		}
	})
}

// TestExcerptsFromJSONAreKnownValid: sources entered from a tool result's JSON are marked valid
// UTF-8 (Verify's leads then skip the repair), a source entered any other way is not, and a lead is
// the same either way.
func TestExcerptsFromJSONAreKnownValid(t *testing.T) {
	var r Registry
	r.Add(ToolResult{Tool: ToolWebSearch, Content: ws(`{"title":"a","url":"https://a.example/1","content":"甲` + "\xff" + `乙"}`)})
	r.Add(ToolResult{Tool: ToolOpenWebPage, Content: `{"url":"https://b.example/2","title":"b","content":"丙\ud800丁"}`})
	r.add(Source{URL: "https://c.example/3", Excerpt: "戊\xff己"}, nil)
	require.Equal(t, 3, r.Len())
	assert.True(t, r.excerptValid(1))
	assert.True(t, r.excerptValid(2))
	assert.False(t, r.excerptValid(3))
	v := Verify("一[^1^] 二[^2^] 三[^3^]", &r)
	require.Len(t, v.Citations, 3)
	for _, c := range v.Citations {
		src, _ := r.Lookup(c.N)
		assert.Equal(t, Lead(src.Excerpt), c.Lead, "source %d", c.N)
	}
	assert.Equal(t, "戊\uFFFD己", v.Citations[2].Lead)
}

// TestSetMessageID: the stored TOOL message's id reaches the sources of its call only, never
// overwrites an id a source already has (a URL first seen in an earlier call keeps that call's
// message), and Verify writes it into the citations.
func TestSetMessageID(t *testing.T) {
	var r Registry
	r.Add(ToolResult{Tool: ToolWebSearch, CallID: "c1", Content: ws(item("A", "https://a.example/"), item("B", "https://b.example/"))})
	r.Add(ToolResult{Tool: ToolWebSearch, CallID: "c2", Content: ws(item("B again", "https://b.example/"), item("C", "https://c.example/"))})
	r.SetMessageID("c1", 11)
	r.SetMessageID("c2", 12)
	r.SetMessageID("c1", 99) // a second call for the same id changes nothing
	r.SetMessageID("c9", 13) // a call that gave no source
	got := map[string]uint64{}
	for _, s := range r.Sources() {
		got[s.URL] = s.MessageID
	}
	assert.Equal(t, map[string]uint64{"https://a.example/": 11, "https://b.example/": 11, "https://c.example/": 12}, got)
	res := Verify("A[^1^] C[^3^]", &r)
	require.Len(t, res.Citations, 2)
	assert.Equal(t, uint64(11), res.Citations[0].MessageID)
	assert.Equal(t, uint64(12), res.Citations[1].MessageID)
	assert.Equal(t, "c2", res.Citations[1].CallID)
}

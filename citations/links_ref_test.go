package citations

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// refAddText is LinkSet.AddText as first written: the raw text's URLs, then, for a text that is a
// JSON object or array, json.Unmarshal into an `any` and a walk of its strings to depth 64. It is
// the reference the one-pass reading (AddText and Registry.AddLinks on the JSON scanner) must agree
// with, set for set.
func refAddText(s *LinkSet, text string) {
	refAddURLsIn(s, text)
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		var v any
		if json.Unmarshal([]byte(t), &v) == nil {
			refAddJSON(s, v, 0)
		}
	}
}

func refAddJSON(s *LinkSet, v any, depth int) {
	if depth > 64 {
		return
	}
	switch x := v.(type) {
	case string:
		refAddURLsIn(s, x)
	case []any:
		for _, e := range x {
			refAddJSON(s, e, depth+1)
		}
	case map[string]any:
		for _, e := range x {
			refAddJSON(s, e, depth+1)
		}
	}
}

// refAddURLsIn is addURLsIn as first written, on a copy of the text.
func refAddURLsIn(s *LinkSet, text string) {
	if !strings.Contains(text, "://") && !containsWWW(text) {
		return
	}
	b := []byte(text)
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case 'h', 'H':
			h := 0
			if ok, _ := hasPrefixFold(b, i, "https://"); ok {
				h = i + 8
			} else if ok, _ := hasPrefixFold(b, i, "http://"); ok {
				h = i + 7
			} else {
				continue
			}
			end, hostLen, _ := urlEnd(b, i, h, true)
			if hostLen > 0 {
				s.AddURL(string(b[i:end]))
				i = end - 1
			}
		case 'w', 'W':
			if i > 0 && !wwwBoundary(b[i-1]) {
				continue
			}
			if ok, _ := hasPrefixFold(b, i, "www."); !ok {
				continue
			}
			end, hostLen, _ := urlEnd(b, i, i+4, true)
			if hostLen > 0 {
				u := string(b[i:end])
				s.AddURL("http://" + u)
				s.AddURL("https://" + u)
				i = end - 1
			}
		}
	}
}

func linkURLs(s *LinkSet) []string { return slices.Sorted(maps.Keys(s.urls)) }

// checkLinkReference compares, for one tool result, the reference reading with AddText and with
// Registry.AddLinks (whose registry and content must also be Add's).
func checkLinkReference(t *testing.T, tool, content string) {
	t.Helper()
	want := NewLinkSet()
	refAddText(want, content)
	got := NewLinkSet()
	got.AddText(content)
	require.Equal(t, linkURLs(want), linkURLs(got), "AddText(%q)", content)

	var plain, withLinks Registry
	set := NewLinkSet()
	res := ToolResult{Tool: tool, Content: content}
	out := withLinks.AddLinks(res, set)
	require.Equal(t, plain.Add(res), out, "AddLinks(%q) content", content)
	require.Equal(t, plain.Sources(), withLinks.Sources(), "AddLinks(%q) sources", content)
	require.Equal(t, plain.Overflow, withLinks.Overflow)
	require.Equal(t, linkURLs(want), linkURLs(set), "AddLinks(%s, %q)", tool, content)
}

var linkRefSeeds = []string{
	`{"results":[{"url":"https:\/\/t.example\/p?a=1\u0026b=2","content":"see https://c.example/x。 and www.w.example"}]}`,
	`{"query":"q","results":[{"title":"T","url":"https://a.example/1","content":"x"}],"total_results":1}`,
	`{"url":"https:\/\/p.example\/a","title":"P","content":"body http:\/\/q.example\/b www\u002ew.example","content_length":3,"truncated":true}`,
	`{"error":"boom","url":"https:\/\/e.example\/"}`,
	`[{"u":"http:\/\/arr.example\/"},"https:\/\/s.example"]`,
	`{"a":"http:\/\/dup.example\/","a":1}`,
	`{"a":{"b":"http:\/\/dup.example\/"},"a":{"c":"http:\/\/kept.example\/"}}`,
	`{"a":"http:\/\/one.example\/","b":"http:\/\/two.example\/","a":"http:\/\/three.example\/"}`,
	`{"\u0061":"http:\/\/esc-key.example\/","a":2}`,
	"{\"\xff\":\"http:\\/\\/bad-key.example\\/\",\"\xfe\":2}",
	`{"n":1e400,"u":"http:\/\/overflow.example\/"}`,
	`{"n":-1e-400,"u":"http:\/\/underflow.example\/"}`,
	`{"n":1.5E+3,"u":"http:\/\/exp.example\/"}`,
	" \u00a0{\"u\":\"http:\\/\\/nbsp.example\\/\"}\u2028 ",
	"{\"u\":\"http:\\/\\/trail.example\\/\"}\u00a0",
	"{\"u\":\"http:\\/\\/trail.example\\/\"}\u00a0x",
	"\v[\"http:\\/\\/vt.example\\/\"]\f",
	"{\"u\":\"http://a.example/\xff\xfe/x\",\"w\":\"www.\xffb.example\"}",
	`{"u":"see \ud83d\ude00 https:\/\/emoji.example\/\ud800x"}`,
	`{"u":"wwW.Case.example and HTTPS:\/\/UP.example"}`,
	`{"u":"http:\/\/unterminated.example"`,
	`{"results":[{"url":"https://a.example/1"}],"results":[{"url":"https:\/\/b.example\/2"}]}`,
	`{"results":[{"url":"https://a.example/1","url":"https:\/\/b.example\/2"}]}`,
	`{"results":"https:\/\/notarray.example"}`,
	`{"results":[1,"https:\/\/elem.example",[{"x":"http:\/\/deep.example"}]]}`,
	"plain text https://plain.example/a and www.plain.example",
	`not json {"u":"http:\/\/x.example"}`,
	``,
	`{}`,
	`[]`,
}

func TestLinkSetReferenceSeeds(t *testing.T) {
	for _, c := range linkRefSeeds {
		for _, tool := range []string{ToolWebSearch, ToolOpenWebPage, "other"} {
			checkLinkReference(t, tool, c)
		}
	}
}

// TestLinkSetReferenceDepth covers the nesting limits a fuzzer does not reach: the walk's 64 and
// encoding/json's 10000.
func TestLinkSetReferenceDepth(t *testing.T) {
	nest := func(n int, open, close, inner string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	u := `"http:\/\/deep.example\/"`
	for _, n := range []int{1, 2, 63, 64, 65, 66, 9999, 10000, 10001} {
		for _, c := range []string{
			nest(n, "[", "]", u),
			nest(n, `{"k":`, "}", u),
			`{"results":` + nest(n, "[", "]", u) + `}`,
			`{"results":[` + nest(n, `{"url":`, "}", u) + `]}`,
			`{"k":` + nest(n, `[{"k":`, "}]", u) + `,"k2":"http:\/\/top.example"}`,
		} {
			for _, tool := range []string{ToolWebSearch, ToolOpenWebPage, "other"} {
				checkLinkReference(t, tool, c)
			}
		}
	}
}

// TestLinkSetReferenceManyKeys covers an object with many URL-bearing members and duplicates among
// them (the frame's key index).
func TestLinkSetReferenceManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 60 {
		if i > 0 {
			b.WriteString(",")
		}
		k := string(rune('a' + i%40))
		b.WriteString(`"` + k + `":"http:\/\/k` + strings.Repeat("x", i) + `.example"`)
		if i%7 == 0 {
			b.WriteString(`,"` + k + `":0`)
		}
	}
	b.WriteString("}")
	checkLinkReference(t, ToolWebSearch, b.String())
	checkLinkReference(t, "other", `[`+b.String()+`,`+b.String()+`]`)
}

// FuzzLinkSetReference: for any tool result text, AddText and Registry.AddLinks give the link set
// the reference reading gives it, and AddLinks leaves the registry and the content as Add does.
func FuzzLinkSetReference(f *testing.F) {
	for _, c := range linkRefSeeds {
		f.Add(ToolWebSearch, c)
		f.Add(ToolOpenWebPage, c)
	}
	f.Add("other", `{"k":[{"u":"https:\/\/o.example\/"}]}`)
	f.Add(ToolWebSearch, ws(item("A", "https://a.example/1?x=1&y=2"), item("B", "http://b.example/2")))
	f.Fuzz(func(t *testing.T, tool, content string) {
		switch tool {
		case ToolWebSearch, ToolOpenWebPage:
		default:
			tool = "other"
		}
		checkLinkReference(t, tool, content)
	})
}

// BenchmarkRegistryLinks: the registry and the link allow set of one run built from the 40
// web_search results of BenchmarkRegistryVerify, each result read once (Registry.AddLinks).
func BenchmarkRegistryLinks(b *testing.B) {
	results, _ := benchResults()
	b.ReportAllocs()
	loopCPU(b, func() {
		var r Registry
		set := NewLinkSet()
		for _, c := range results {
			_ = r.AddLinks(ToolResult{Tool: ToolWebSearch, Content: c}, set)
		}
		if r.Len() != 20 || set.Len() != 40 {
			b.Fatalf("%d sources, %d links", r.Len(), set.Len())
		}
	})
}

// BenchmarkRegistryLinksBaseline is the same work the earlier way, in the same run: Add, then the
// reference AddText (json.Unmarshal into an any and a walk of it) on every result.
func BenchmarkRegistryLinksBaseline(b *testing.B) {
	results, _ := benchResults()
	b.ReportAllocs()
	loopCPU(b, func() {
		var r Registry
		set := NewLinkSet()
		for _, c := range results {
			_ = r.Add(ToolResult{Tool: ToolWebSearch, Content: c})
			refAddText(set, c)
		}
		if r.Len() != 20 || set.Len() != 40 {
			b.Fatalf("%d sources, %d links", r.Len(), set.Len())
		}
	})
}

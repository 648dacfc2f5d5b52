package citations

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"time"
)

// Tool names whose results may become sources. No other tool's output ever enters a registry.
const (
	ToolWebSearch   = "web_search"
	ToolOpenWebPage = "open_web_page"
)

// MaxSources caps a run's registry.
const MaxSources = 20

// ToolResult is one TOOL message of a run, in persisted order.
type ToolResult struct {
	Tool      string
	CallID    string
	MessageID uint64
	Content   string
	At        time.Time
}

// Source is one registry entry. N is its registry number (1-based), the number the model uses in
// [^N^]. Excerpt is the text the model was given for it.
type Source struct {
	N         int
	URL       string
	Title     string
	Tool      string
	CallID    string
	MessageID uint64
	Excerpt   string
	At        time.Time
}

// Registry is the ordered, deduplicated set of sources a run really retrieved. The zero value is an
// empty registry ready to use. It is not safe for concurrent use.
type Registry struct {
	sources []Source
	byURL   map[string]int // URL → registry number
	// Overflow counts distinct sources that arrived after the cap.
	Overflow int
}

// BuildRegistry builds the registry of a run from its tool results in persisted order.
func BuildRegistry(results []ToolResult) *Registry {
	r := &Registry{}
	for _, res := range results {
		r.Add(res)
	}
	return r
}

// Len is the number of sources.
func (r *Registry) Len() int { return len(r.sources) }

// Sources returns the entries in registry order. The slice must not be modified.
func (r *Registry) Sources() []Source { return r.sources }

// Lookup returns the source with registry number n.
func (r *Registry) Lookup(n int) (Source, bool) {
	if n < 1 || n > len(r.sources) {
		return Source{}, false
	}
	return r.sources[n-1], true
}

// webSearchResult and openWebPageResult are the success shapes of DESIGN §4. Fields are decoded
// loosely (json.RawMessage) so that a wrong type in one field only disqualifies that entry.
type webSearchResult struct {
	Title   json.RawMessage `json:"title"`
	URL     json.RawMessage `json:"url"`
	Content json.RawMessage `json:"content"`
}

// Add parses one tool result, appends its new sources and returns the content to hand to the model:
// the same JSON with a "ref" number on every source that has one. Results of other tools, failure
// shapes, non-JSON and other shapes add nothing and come back unchanged. Adding an already annotated
// result gives the same numbers, so the hook can rebuild the registry from stored TOOL messages.
func (r *Registry) Add(res ToolResult) string {
	switch res.Tool {
	case ToolWebSearch:
		return r.addWebSearch(res)
	case ToolOpenWebPage:
		return r.addOpenWebPage(res)
	}
	return res.Content
}

func (r *Registry) addWebSearch(res ToolResult) string {
	var top map[string]json.RawMessage
	if !decodeObject(res.Content, &top) {
		return res.Content
	}
	if _, failed := top["error"]; failed {
		return res.Content
	}
	var items []json.RawMessage
	if err := json.Unmarshal(top["results"], &items); err != nil {
		return res.Content
	}
	changed := false
	for i, raw := range items {
		var item map[string]json.RawMessage
		if err := json.Unmarshal(raw, &item); err != nil {
			continue
		}
		u, title, excerpt := jsonString(item["url"]), jsonString(item["title"]), jsonString(item["content"])
		n := r.add(Source{URL: u, Title: title, Tool: res.Tool, CallID: res.CallID, MessageID: res.MessageID, Excerpt: excerpt, At: res.At})
		if setRef(item, n) {
			items[i] = mustMarshal(item)
			changed = true
		}
	}
	if !changed {
		return res.Content
	}
	top["results"] = mustMarshal(items)
	return string(mustMarshal(top))
}

func (r *Registry) addOpenWebPage(res ToolResult) string {
	var top map[string]json.RawMessage
	if !decodeObject(res.Content, &top) {
		return res.Content
	}
	if _, failed := top["error"]; failed {
		return res.Content
	}
	var content string
	if err := json.Unmarshal(top["content"], &content); err != nil || top["content"] == nil {
		return res.Content // success requires a string content
	}
	n := r.add(Source{URL: jsonString(top["url"]), Title: jsonString(top["title"]), Tool: res.Tool, CallID: res.CallID, MessageID: res.MessageID, Excerpt: content, At: res.At})
	if !setRef(top, n) {
		return res.Content
	}
	return string(mustMarshal(top))
}

// add appends s when its URL is valid and new and the cap allows, returning its registry number
// (0 when it has none).
func (r *Registry) add(s Source) int {
	u, ok := NormalizeURL(s.URL)
	if !ok {
		return 0
	}
	s.URL = u
	if n, dup := r.byURL[u]; dup {
		return n
	}
	if len(r.sources) >= MaxSources {
		r.Overflow++
		return 0
	}
	if r.byURL == nil {
		r.byURL = make(map[string]int)
	}
	s.N = len(r.sources) + 1
	s.Title = cleanTitle(s.Title)
	r.sources = append(r.sources, s)
	r.byURL[u] = s.N
	return s.N
}

// setRef writes "ref": n into obj; it reports whether obj changed.
func setRef(obj map[string]json.RawMessage, n int) bool {
	old, had := obj["ref"]
	if n == 0 {
		if had {
			delete(obj, "ref")
			return true
		}
		return false
	}
	v := mustMarshal(n)
	if had && bytes.Equal(old, v) {
		return false
	}
	obj["ref"] = v
	return true
}

// NormalizeURL accepts only absolute http(s) URLs with a host and returns them trimmed.
func NormalizeURL(raw string) (string, bool) {
	s := strings.TrimSpace(raw)
	if s == "" || len(s) > 4096 {
		return "", false
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "", false
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	default:
		return "", false
	}
	return s, true
}

// cleanTitle keeps titles to one line of reasonable length; HTML in titles stays text and is escaped
// by whoever renders it.
func cleanTitle(t string) string {
	t = strings.Join(strings.Fields(t), " ")
	if r := []rune(t); len(r) > 300 {
		t = string(r[:300])
	}
	return t
}

// Digest identifies an excerpt's text, so a later fetch can tell whether the source changed.
func Digest(excerpt string) string {
	sum := sha256.Sum256([]byte(excerpt))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func decodeObject(s string, v *map[string]json.RawMessage) bool {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "{") {
		return false
	}
	return json.Unmarshal([]byte(t), v) == nil && *v != nil
}

func jsonString(raw json.RawMessage) string {
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Values here come from json.Unmarshal or are ints; re-marshalling them cannot fail.
		return json.RawMessage("null")
	}
	return b
}

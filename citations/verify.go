package citations

import (
	"encoding/json"
	"slices"
	"time"
)

// Citation is one verified citation as stored in metadata.citations. N is the registry number.
type Citation struct {
	N           int        `json:"n"`
	URL         string     `json:"url"`
	Title       string     `json:"title"`
	Tool        string     `json:"tool,omitempty"`
	RetrievedAt *time.Time `json:"retrievedAt,omitempty"`
	Digest      string     `json:"digest,omitempty"`
	// Lead is the first lines of the excerpt (see Lead), what a source card shows at once.
	Lead string `json:"lead,omitempty"`
	// CallID is the tool call whose result held the source and MessageID that result's stored TOOL
	// message (0 when the registry was built before the message was stored, as a live run's is).
	// They let a reader find the one tool message that holds the excerpt instead of rebuilding the
	// registry from the whole run (the preview). Records written before these fields have neither.
	CallID    string `json:"callId,omitempty"`
	MessageID uint64 `json:"messageId,omitempty"`
}

// Verification is the outcome of checking an answer against a registry.
type Verification struct {
	Citations []Citation // cited entries only, ordered by N, each once
	Seen      int        // markers in the answer
	Kept      int        // markers pointing into the registry
	Dropped   int        // Seen - Kept
}

// Verify keeps the markers of content with 1 ≤ n ≤ reg.Len(), each number once, ordered by n.
// Markers inside code (inline code spans, fenced or indented code blocks) are literal text, not
// citations: they are neither seen nor kept (DESIGN §4, "Code").
func Verify(content string, reg *Registry) Verification {
	var v Verification
	// A registry holds at most MaxSources entries, so "cited" is a small array rather than a map,
	// and walking it in order gives the citations in n order without sorting.
	var cited [MaxSources + 1]bool
	k := 0
	forMarkersOutsideCode(content, func(m Marker) {
		v.Seen++
		if m.N < 1 || m.N > reg.Len() {
			return
		}
		v.Kept++
		if !cited[m.N] {
			cited[m.N] = true
			k++
		}
	})
	v.Dropped = v.Seen - v.Kept
	if k == 0 {
		return v
	}
	v.Citations = make([]Citation, 0, k)
	var at []time.Time // one block for every citation's retrieval time
	for n := 1; n <= reg.Len(); n++ {
		if !cited[n] {
			continue
		}
		src := reg.sources[n-1]
		c := Citation{N: n, URL: src.URL, Title: src.Title, Tool: src.Tool, Digest: Digest(src.Excerpt), Lead: lead(src.Excerpt, reg.excerptValid(n)),
			CallID: src.CallID, MessageID: src.MessageID}
		if !src.At.IsZero() {
			if at == nil {
				at = make([]time.Time, 0, k)
			}
			at = append(at, src.At.UTC())
			c.RetrievedAt = &at[len(at)-1]
		}
		v.Citations = append(v.Citations, c)
	}
	return v
}

// DisplayNumbers maps registry numbers to display numbers 1..k in n order: with citations n={2,5},
// [^5^] shows as 2.
func DisplayNumbers(cits []Citation) map[int]int {
	sorted := slices.Clone(cits)
	slices.SortFunc(sorted, func(a, b Citation) int { return a.N - b.N })
	m := make(map[int]int, len(sorted))
	for _, c := range sorted {
		if _, dup := m[c.N]; !dup {
			m[c.N] = len(m) + 1
		}
	}
	return m
}

// FromMetadata reads metadata.citations from a message's metadata. Anything malformed yields no
// citations and no error: a bad entry is skipped, a bad document yields nil. Entries are returned
// ordered by N, each N once, URLs http(s) only.
func FromMetadata(metadata []byte) []Citation {
	if len(metadata) == 0 {
		return nil
	}
	var doc struct {
		Citations []json.RawMessage `json:"citations"`
	}
	if json.Unmarshal(metadata, &doc) != nil {
		return nil
	}
	var out []Citation
	seen := map[int]bool{}
	for _, raw := range doc.Citations {
		var c Citation
		if json.Unmarshal(raw, &c) != nil || c.N < 1 || seen[c.N] {
			continue
		}
		u, ok := NormalizeURL(c.URL)
		if !ok {
			continue
		}
		c.URL = u
		seen[c.N] = true
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Citation) int { return a.N - b.N })
	return out
}

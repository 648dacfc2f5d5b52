package citations

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// refRegistry is the registry's add as first written (a map by URL, net/url for every URL, the
// title cut through a rune slice), kept to check the allocation-free one against.
type refRegistry struct {
	sources  []Source
	byURL    map[string]int
	overflow int
}

func (r *refRegistry) add(s Source) int {
	u, ok := refNormalizeURL(s.URL)
	if !ok {
		return 0
	}
	s.URL = u
	if n, dup := r.byURL[u]; dup {
		return n
	}
	if len(r.sources) >= MaxSources {
		r.overflow++
		return 0
	}
	if r.byURL == nil {
		r.byURL = make(map[string]int)
	}
	s.N = len(r.sources) + 1
	t := strings.Join(strings.Fields(s.Title), " ")
	if rs := []rune(t); len(rs) > 300 {
		t = string(rs[:300])
	}
	s.Title = t
	r.sources = append(r.sources, s)
	r.byURL[u] = s.N
	return s.N
}

func refNormalizeURL(raw string) (string, bool) {
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

// verifyReference is Verify as first written: every marker collected, a map of seen numbers, the
// citations sorted afterwards, the excerpt copied to be hashed, the whole excerpt read for the lead.
func verifyReference(content string, r *refRegistry) Verification {
	var v Verification
	var seen map[int]bool
	for _, m := range MarkersOutsideCode(content) {
		n := m.N
		v.Seen++
		if n < 1 || n > len(r.sources) {
			continue
		}
		src := r.sources[n-1]
		v.Kept++
		if seen[n] {
			continue
		}
		if seen == nil {
			seen = make(map[int]bool)
		}
		seen[n] = true
		sum := sha256.Sum256([]byte(src.Excerpt))
		c := Citation{N: n, URL: src.URL, Title: src.Title, Tool: src.Tool, Digest: "sha256:" + hex.EncodeToString(sum[:]), Lead: leadReference(src.Excerpt), CallID: src.CallID, MessageID: src.MessageID}
		if !src.At.IsZero() {
			at := src.At.UTC()
			c.RetrievedAt = &at
		}
		v.Citations = append(v.Citations, c)
	}
	v.Dropped = v.Seen - v.Kept
	slices.SortFunc(v.Citations, func(a, b Citation) int { return a.N - b.N })
	return v
}

// FuzzVerifyReference: sources entered one per line of urls (title and excerpt derived from the
// fuzzer's text) get the same numbers, titles and overflow count in both registries, and the answer
// verifies to the same record.
func FuzzVerifyReference(f *testing.F) {
	f.Add("https://a.example/1\nhttps://b.example/2\n https://a.example/1 \nftp://x/\nhttp://a b/", "标题  one\ttwo", "excerpt\n# head", "a[^1^] b[^2^][^2^] [^3^] `[^1^]` [^0^]")
	f.Add(strings.Repeat("https://kb.example.com/d\n", 3)+"HTTPS://K.example:80/%E4?x", strings.Repeat("长", 301), strings.Repeat("x ", 900), "[^1^][^2^]")
	f.Add("http://h.example/%zz\nhttp://h.example/#f\nhttp://[::1]:8/", "\u00a0t\u3000", "\xff\xfe", "    [^1^]\n\n[^2^] <https://x.example/[^3^]>")
	f.Fuzz(func(t *testing.T, urls, title, excerpt, answer string) {
		var fast Registry
		var ref refRegistry
		at := time.Date(2026, 12, 1, 6, 0, 0, 0, time.FixedZone("x", 3600))
		for i, u := range strings.Split(urls, "\n") {
			s := Source{URL: u, Title: fmt.Sprintf("%s %d", title, i), Excerpt: excerpt[:len(excerpt)*i%(len(excerpt)+1)], Tool: ToolWebSearch}
			if i%2 == 0 {
				s.At = at.Add(time.Duration(i) * time.Second)
			}
			got, want := fast.add(s, nil), ref.add(s)
			require.Equal(t, want, got, "number of %q", u)
		}
		require.Equal(t, ref.overflow, fast.Overflow)
		require.Equal(t, len(ref.sources), fast.Len())
		for i, s := range ref.sources {
			require.Equal(t, s, fast.Sources()[i])
		}
		require.Equal(t, verifyReference(answer, &ref), Verify(answer, &fast), "verify %q", answer)
	})
}

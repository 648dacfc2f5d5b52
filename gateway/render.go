package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/citations/markdown"
	"github.com/citegate/citegate/store"
)

// defaultRenderCacheBytes bounds the HTML the render cache keeps. A typical answer renders to a few
// KiB, so this holds thousands of answers; the pathological ones are far larger and still fit.
const defaultRenderCacheBytes = 32 << 20

// renderKey identifies one rendering: a digest of everything the HTML depends on.
type renderKey [sha256.Size]byte

// renderCache renders an answer's HTML once and keeps it, so every later view of the same answer
// (history, REST messages, share page, the websocket's final frames) costs a hash of its inputs and
// a map look-up instead of a goldmark run. Stored answers are immutable except for their metadata,
// and the key digests every input the HTML depends on (content, the citations' numbers, URLs and
// titles, the allowed links, language, anchor, preview id), so an entry can never be stale: when
// the citations change the key changes, and the old entry simply ages out.
//
// Memory is bounded by the total length of the cached HTML (least recently used first out); an
// HTML larger than a quarter of the bound is returned but not kept. Concurrent requests for the
// same uncached key wait for one rendering instead of each running goldmark (a share link of a
// costly answer opened by many readers at once).
type renderCache struct {
	mu       sync.Mutex
	lru      *simplelru.LRU[renderKey, string]
	bytes    int
	maxBytes int
	inflight map[renderKey]*renderCall
	hits     uint64
	misses   uint64
}

type renderCall struct {
	done chan struct{}
	html string
}

// newRenderCache returns a cache bounded to maxBytes of HTML; maxBytes ≤ 0 disables caching
// (every call renders, as before the cache existed; benchmarks use it as the baseline).
func newRenderCache(maxBytes int) *renderCache {
	c := &renderCache{maxBytes: maxBytes, inflight: map[renderKey]*renderCall{}}
	if maxBytes > 0 {
		// The entry count is bounded by the byte budget (every entry costs at least its key), so
		// the LRU's own size limit only has to be out of the way.
		lru, err := simplelru.NewLRU[renderKey, string](maxBytes/sha256.Size+1, func(_ renderKey, html string) {
			c.bytes -= entryCost(html)
		})
		if err == nil { // only a non-positive size fails, which the guard above rules out
			c.lru = lru
		}
	}
	return c
}

// entryCost is what one entry counts against the byte budget: its HTML plus its key and the
// bookkeeping around it.
func entryCost(html string) int { return len(html) + 2*sha256.Size + 64 }

// get returns the HTML for key, calling render once when it is not cached.
func (c *renderCache) get(key renderKey, render func() string) string {
	if c == nil || c.lru == nil {
		return render()
	}
	c.mu.Lock()
	if html, ok := c.lru.Get(key); ok {
		c.hits++
		c.mu.Unlock()
		return html
	}
	if call, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		<-call.done
		return call.html
	}
	c.misses++
	call := &renderCall{done: make(chan struct{})}
	c.inflight[key] = call
	c.mu.Unlock()

	// The markdown renderer recovers its own panics; should render still panic, the waiters are
	// released with an empty result by the deferred cleanup and the panic goes on to the caller's
	// recovery (the HTTP server's or the event router's).
	defer func() {
		c.mu.Lock()
		delete(c.inflight, key)
		c.mu.Unlock()
		close(call.done)
	}()
	call.html = render()
	cost := entryCost(call.html)
	if cost <= c.maxBytes/4 {
		c.mu.Lock()
		if !c.lru.Contains(key) {
			c.lru.Add(key, call.html)
			c.bytes += cost
			for c.bytes > c.maxBytes {
				c.lru.RemoveOldest() // the eviction callback lowers c.bytes
			}
		}
		c.mu.Unlock()
	}
	return call.html
}

// stats reports hits, misses, cached bytes and entries (tests and benchmarks).
func (c *renderCache) stats() (hits, misses uint64, bytes, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru != nil {
		entries = c.lru.Len()
	}
	return c.hits, c.misses, c.bytes, entries
}

// answerKey digests every input of markdown.Render for one answer (allowed is the sorted list
// behind opt.AllowLink). Fields are length-prefixed so no two different inputs produce the same
// byte stream.
func answerKey(content string, cits []citations.Citation, allowed []string, opt markdown.Options) renderKey {
	return answerKeySites(content, cits, allowed, nil, opt)
}

// answerKeySites is answerKey with the site names the sources list shows (sites[i] names
// cits[i]'s URL; nil when the server names none).
func answerKeySites(content string, cits []citations.Citation, allowed, sites []string, opt markdown.Options) renderKey {
	h := sha256.New()
	writeField(h, "answer/v2")
	writeField(h, opt.Lang)
	writeField(h, opt.Anchor)
	writeField(h, strconv.FormatUint(opt.MessageID, 10))
	writeField(h, content)
	// Only what the renderer shows of a citation takes part (the source card's retrieval time and
	// lead included); digests do not change the HTML, so a record read back from the store hits
	// the entry the live run made.
	writeField(h, strconv.Itoa(len(cits)))
	for _, c := range cits {
		writeField(h, strconv.Itoa(c.N))
		writeField(h, c.URL)
		writeField(h, c.Title)
		writeField(h, c.Lead)
		if c.RetrievedAt != nil {
			writeField(h, c.RetrievedAt.UTC().Format(time.RFC3339))
		} else {
			writeField(h, "")
		}
	}
	writeField(h, strconv.Itoa(len(sites)))
	for _, site := range sites {
		writeField(h, site)
	}
	writeField(h, strconv.Itoa(len(allowed)))
	for _, u := range allowed {
		writeField(h, u)
	}
	var k renderKey
	h.Sum(k[:0])
	return k
}

func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// renderAnswer renders an answer through the cache, under the link rule: the answer may show the
// URLs in allowed (metadata.links.allowed, see linkAllowList) and its citations' URLs, no other.
func (s *Server) renderAnswer(content string, cits []citations.Citation, allowed []string, opt markdown.Options) string {
	sites := s.siteNames(cits)
	return s.renders.get(answerKeySites(content, cits, allowed, sites, opt), func() string {
		opt.AllowLink = citations.AllowList(allowed)
		if sites != nil {
			named := make(map[string]string, len(cits))
			for i, c := range cits {
				named[c.URL] = sites[i]
			}
			opt.SiteName = func(u string) string { return named[u] }
		}
		r := markdown.RenderAnswer(content, cits, opt)
		if r.Panic != nil {
			s.log.Error("markdown renderer panicked; the answer is shown as text", "panic", r.Panic)
		}
		return r.HTML
	})
}

// siteNames names the site of each citation with Config.SiteName (nil when it is not set).
func (s *Server) siteNames(cits []citations.Citation) []string {
	if s.cfg.SiteName == nil || len(cits) == 0 {
		return nil
	}
	out := make([]string, len(cits))
	for i, c := range cits {
		out[i] = s.cfg.SiteName(c.URL)
	}
	return out
}

// siteName names a source's site as the sources list does: Config.SiteName's name, else the
// URL's domain.
func (s *Server) siteName(u string) string {
	if s.cfg.SiteName != nil {
		if name := s.cfg.SiteName(u); name != "" {
			return name
		}
	}
	return markdown.Domain(u)
}

// linkAllowList is the list behind an answer's link rule (DESIGN §4): metadata.links.allowed (the
// verified URLs the answer shows, recorded with the answer) and the URLs of its citations, sorted
// and each once so equal lists digest alike. Metadata without links allows only the citations.
func linkAllowList(metadata []byte, cits []citations.Citation) []string {
	var out []string
	if len(metadata) > 0 && bytes.Contains(metadata, []byte(`"links"`)) {
		var doc struct {
			Links struct {
				Allowed []string `json:"allowed"`
			} `json:"links"`
		}
		if json.Unmarshal(metadata, &doc) == nil {
			out = append(out, doc.Links.Allowed...)
		}
	}
	for _, c := range cits {
		out = append(out, c.URL)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// allowFunc is the link rule's allow-func for a stored answer.
func allowFunc(metadata []byte, cits []citations.Citation) func(string) bool {
	return citations.AllowList(linkAllowList(metadata, cits))
}

// renderMessage renders m's HTML. withPreview adds the excerpt buttons (not on share pages, where
// previews are not available to anonymous readers). A user's own text is escaped, which costs
// little, so only answers go through the cache.
func (s *Server) renderMessage(m store.Message, cits []citations.Citation, lang string, withPreview bool) string {
	if m.Role == store.RoleUser {
		return markdown.RenderPlain(m.Content)
	}
	opt := markdown.Options{Lang: lang, Anchor: anchorFor(m.ID)}
	if withPreview {
		opt.MessageID = m.ID
	}
	return s.renderAnswer(m.Content, cits, linkAllowList(m.Metadata, cits), opt)
}

package tools

import (
	"sort"
	"strings"
	"testing"

	"github.com/citegate/citegate/internal/textseg"
)

// TestBestPassageReference: bestPassage picks the same passage as the version that looked every
// query term up in every unit of every window (kept below), for every document of the bundled
// corpus and a spread of queries: the load generator's, each document's title, and words of its
// text.
func TestBestPassageReference(t *testing.T) {
	c := loadSample(t)
	queries := []string{"电子发票抬头写错了怎么办？", "How do I reset my password?", "报销多久能到账？", "VPN 连不上怎么办？",
		"出差住宿标准", "年假可以结转吗", "VPN authenticator MFA prompt", "会议室 预订", "the", "发票", "password expire 90 days"}
	for _, d := range c.docs {
		queries = append(queries, d.Title)
		words := strings.Fields(d.Text)
		for i := 0; i < len(words); i += 7 {
			queries = append(queries, strings.Join(words[i:min(i+3, len(words))], " "))
		}
	}
	for _, q := range queries {
		qterms := c.terms(q)
		for _, d := range c.docs {
			if got, want := c.bestPassage(d, qterms), c.bestPassageReference(d, qterms); got != want {
				t.Fatalf("query %q, document %s:\n got %q\nwant %q", q, d.Slug, got, want)
			}
		}
	}
}

func (c *Corpus) bestPassageReference(d *corpusDoc, qterms map[string]struct{}) string {
	// Only query terms that occur somewhere in the corpus can score.
	type weighted struct {
		term string
		idf  float64
		han  bool
	}
	terms := make([]weighted, 0, len(qterms))
	for t := range qterms {
		if w, ok := c.idf[t]; ok {
			terms = append(terms, weighted{t, w, textseg.HasHan(t)})
		}
	}
	// A fixed order keeps floating-point sums, and so tie-breaks, deterministic.
	sort.Slice(terms, func(i, j int) bool { return terms[i].term < terms[j].term })
	seen := make([]int, len(terms))
	var best []int
	bestScore := -1.0
	window := make([]int, 0, 16)
	for i := range d.units {
		clear(seen)
		// The repeated heading and table header are shown but not scored: the window that starts
		// at the heading itself scores them, and ties go to the earlier window.
		window = append(window[:0], c.passagePrefix(d, i)...)
		prefix := len(window)
		score, size := 0.0, 0
		for _, k := range window {
			size += d.units[k].runes + 1
		}
		for j := i; j < len(d.units); j++ {
			add := d.units[j].runes
			if len(window) > 0 {
				add++ // the newline joining units
			}
			if size+add > maxPassageRunes && j > i {
				break
			}
			size += add
			window = append(window, j)
		}
		// A heading whose section did not fit says nothing: it would only score the window for
		// words the reader then does not find in it.
		for len(window) > prefix+1 && d.units[window[len(window)-1]].kind == unitHeading {
			window = window[:len(window)-1]
		}
		maxIDF := 0.0
		for _, k := range window[prefix:] {
			for n, w := range terms {
				maxIDF = max(maxIDF, w.idf)
				if _, hit := d.units[k].terms[w.term]; !hit {
					continue
				}
				// A Chinese name quoted in an English line ("the Chinese guide 域账号密码重置") does not
				// make it the passage a Chinese query term asks for.
				if w.han && d.units[k].english {
					continue
				}
				switch seen[n] {
				case 0:
					score += w.idf
				case 1:
					// A second mention helps a little; more do not, or a long section that merely
					// repeats the topic word would beat the one that answers.
					score += 0.1 * w.idf
				}
				seen[n]++
			}
		}
		// A window that opens with a heading naming the question's terms is that section.
		if d.units[i].kind == unitHeading {
			for _, w := range terms {
				if _, hit := d.units[i].terms[w.term]; hit {
					score += 0.3 * w.idf
				}
			}
		}
		if last := window[len(window)-1]; last+1 < len(d.units) && d.units[last+1].kind == unitTableRow &&
			(d.units[last].kind == unitTableRow || d.units[last].kind == unitTableHeader) {
			score -= 0.15 * maxIDF // the window cuts a table: the rows it leaves out may be the answer
		}
		if i > 0 && (d.units[i].kind == unitItem && d.units[i-1].kind == unitItem ||
			d.units[i].kind == unitTableRow && d.units[i-1].kind == unitTableRow) {
			score -= 0.15 * maxIDF // it starts in the middle of a list or table: steps 1–3 matter too
		}
		// Sums of the same terms in another order differ in the last bits; only a real gain wins.
		if score > bestScore+1e-9 {
			best, bestScore = append(best[:0], window...), score
		}
	}
	parts := make([]string, 0, len(best))
	for _, k := range best {
		parts = append(parts, d.units[k].text)
	}
	s, _ := truncateRunes(strings.Join(parts, "\n"), maxPassageRunes)
	return s
}

// Package tools implements the agent's retrieval tools: web_search (over a pluggable Searcher —
// the bundled local knowledge corpus, SearXNG or Tavily) and open_web_page (a guarded HTTP fetcher
// that turns pages into readable text). Their results and failures have exactly the shapes of
// DESIGN §4, because the citation registry is built from them.
package tools

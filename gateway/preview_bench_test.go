package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// BenchmarkPreview measures one preview (the handler, no network) of the last source of a run
// with ten web_search results of ~24 KiB each, reading the one tool message the citation names
// (callId, what a run writes now) against rebuilding the run's registry (a record without it).
// Figures in docs/benchmarks.md.
func BenchmarkPreview(b *testing.B) {
	e := newBenchEnv(b)
	ctx := b.Context()
	u, _, err := e.st.CreateUser(ctx, "alice")
	require.NoError(b, err)
	sess, err := e.st.CreateSession(ctx, store.Session{UserID: u.ID, Channel: "desktop"})
	require.NoError(b, err)
	const run = "run-1"
	var results []citations.ToolResult
	for i := range 10 {
		call := fmt.Sprintf("call_%d", i)
		content := searchResult("q", [3]string{"来源", fmt.Sprintf("https://example.com/%d", i), strings.Repeat("内容", 4000)})
		m, err := e.st.AppendMessage(ctx, store.Message{SessionID: sess.ID, RunID: run, Role: store.RoleTool, ToolCallID: call, ToolName: "web_search", Content: content})
		require.NoError(b, err)
		results = append(results, citations.ToolResult{Tool: "web_search", CallID: call, Content: content, At: m.CreatedAt})
	}
	v := citations.Verify("答案[^10^]", citations.BuildRegistry(results))
	require.Len(b, v.Citations, 1)
	for _, c := range []struct {
		name string
		edit func(*citations.Citation)
	}{
		{"one-tool-message", func(*citations.Citation) {}},
		{"whole-run", func(c *citations.Citation) { c.CallID = "" }},
	} {
		cits := append([]citations.Citation(nil), v.Citations...)
		c.edit(&cits[0])
		meta, err := json.Marshal(map[string]any{"citations": cits})
		require.NoError(b, err)
		ans, err := e.st.AppendMessage(ctx, store.Message{SessionID: sess.ID, RunID: run, Role: store.RoleAssistant, Content: "答案[^10^]", Metadata: meta})
		require.NoError(b, err)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("GET", "/", nil)
				r.SetPathValue("id", fmt.Sprint(ans.ID))
				r.SetPathValue("n", "10")
				w := &discardWriter{h: http.Header{}}
				if err := e.srv.handlePreview(w, r, u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

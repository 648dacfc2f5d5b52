package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

func httptestGet(srv *Server, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

func TestExportRoundTrip(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "export")
	out := e.runTurn(s.ID, "电子发票抬头写错了怎么办")
	require.Equal(t, store.PhaseCompleted, out.Phase)
	require.NotEmpty(t, out.Citations)
	// Add an image to the final answer's metadata, as an attachment would.
	png := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 512) // 12,288 base64 chars ≈ 9 KB
	require.NoError(t, e.st.MergeMetadata(t.Context(), out.FinalMessageID, map[string]json.RawMessage{
		"attachments": json.RawMessage(`[{"name":"chart","preview":"data:image/png;base64,` + png + `"}]`),
		"note":        json.RawMessage(`"inline data:text/plain;base64,SGVsbG8= here"`),
	}))
	stored, err := e.st.ListMessages(t.Context(), s.ID)
	require.NoError(t, err)

	status, hdr, body := e.do("GET", "/api/sessions/"+s.ID+"/export.jsonl", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "application/x-ndjson; charset=utf-8", hdr.Get("Content-Type"))
	assert.Contains(t, hdr.Get("Content-Disposition"), "attachment")
	assert.Equal(t, "no-store", hdr.Get("Cache-Control"))
	assert.NotContains(t, body, png)

	lines := parseJSONL(t, body)
	require.Len(t, lines, len(stored), "every message is exported, tool calls and results included")
	roles := map[string]int{}
	for i, l := range lines {
		m := stored[i]
		roles[l["role"].(string)]++
		assert.Equal(t, float64(m.ID), l["id"])
		assert.Equal(t, string(m.Role), l["role"])
		assert.Equal(t, m.Content, l["content"], "raw content, markers kept")
		assert.Contains(t, l, "createdAt")
		if m.Role == store.RoleTool {
			assert.Equal(t, m.ToolCallID, l["toolCallId"])
			assert.Equal(t, m.ToolName, l["toolName"])
		}
		if len(m.ToolCalls) > 0 {
			calls := l["toolCalls"].([]any)
			assert.Equal(t, m.ToolCalls[0].Name, calls[0].(map[string]any)["name"])
		}
	}
	assert.Equal(t, map[string]int{"USER": 1, "ASSISTANT": 2, "TOOL": 1}, roles)

	final := lines[len(lines)-1]
	assert.Contains(t, final["content"], "[^1^]")
	md, err := json.Marshal(final["metadata"])
	require.NoError(t, err)
	assert.Equal(t, out.Citations, citations.FromMetadata(md), "citations survive the export")
	assert.Equal(t, citations.FromMetadata(stored[len(stored)-1].Metadata), citations.FromMetadata(md))
	meta := final["metadata"].(map[string]any)
	att := meta["attachments"].([]any)[0].(map[string]any)
	assert.Equal(t, "chart", att["name"])
	assert.Equal(t, "[data URI removed: image/png, 9 KB]", att["preview"])
	assert.Equal(t, "inline [data URI removed: text/plain, 5 B] here", meta["note"])
}

func TestScrubMetadata(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"empty", ``, ``},
		{"no data uri, bytes kept", `{"b":1, "a":[1.50,"x"]}`, `{"b":1, "a":[1.50,"x"]}`},
		{"not base64", `{"u":"data:text/plain,hello"}`, `{"u":"data:text/plain,hello"}`},
		{"nested", `{"a":{"b":["data:image/jpeg;base64,/9j/4AAQ"]},"n":12345678901234567890}`,
			`{"a":{"b":["[data URI removed: image/jpeg, 6 B]"]},"n":12345678901234567890}`},
		{"with parameters", `{"x":"data:image/svg+xml;charset=utf-8;base64,PHN2Zz4="}`, `{"x":"[data URI removed: image/svg+xml, 5 B]"}`},
		{"no mime", `{"x":"data:;base64,AAAA"}`, `{"x":"[data URI removed: application/octet-stream, 3 B]"}`},
		{"invalid json kept", `{"x":"data:image/png;base64,AAAA"`, `{"x":"data:image/png;base64,AAAA"`},
		{"keys with base64 only", `{"data:image/png;base64,AAAA":1}`, `{"data:image/png;base64,AAAA":1}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, string(scrubMetadata(json.RawMessage(c.in))))
		})
	}
}

// TestExportStreams exports a long session: the response is streamed (chunked, no length known
// up front) and complete.
func TestExportStreams(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	s := e.session(u, "long")
	const n = 150
	for i := range n {
		e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprintf("message %d %s", i, strings.Repeat("x", 2000))})
	}
	req, _ := http.NewRequest("GET", e.ts.URL+"/api/sessions/"+s.ID+"/export.jsonl", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), resp.ContentLength)
	assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	lines := parseJSONL(t, readAll(t, resp))
	assert.Len(t, lines, n)
}

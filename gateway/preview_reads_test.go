package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// setCitations rewrites the answer's stored citations with edit applied to each.
func setCitations(t *testing.T, f *previewFixture, edit func(c *citations.Citation)) {
	t.Helper()
	ctx := context.Background()
	m, err := f.e.st.GetMessage(ctx, f.out.FinalMessageID)
	require.NoError(t, err)
	cits := citations.FromMetadata(m.Metadata)
	for i := range cits {
		edit(&cits[i])
	}
	raw, err := json.Marshal(cits)
	require.NoError(t, err)
	require.NoError(t, f.e.st.MergeMetadata(ctx, m.ID, map[string]json.RawMessage{"citations": raw}))
}

// toolMessages are the run's TOOL messages by tool call id.
func toolMessages(t *testing.T, f *previewFixture) map[string]store.Message {
	t.Helper()
	m, err := f.e.st.GetMessage(context.Background(), f.out.FinalMessageID)
	require.NoError(t, err)
	run, err := f.e.st.ListRunMessages(context.Background(), m.RunID)
	require.NoError(t, err)
	out := map[string]store.Message{}
	for _, t := range run {
		if t.Role == store.RoleTool {
			out[t.ToolCallID] = t
		}
	}
	return out
}

// TestPreviewReadsOneToolMessage: a citation written by a run names its tool call and that call's
// stored TOOL message, and the preview reads the answer and that one message by id, never the run;
// a record that names only the call reads the message through the call; the excerpts are the ones
// the run-wide registry gives (they are compared with a preview of the same record with the
// call and message ids taken out, which still takes the old path and reads the run).
func TestPreviewReadsOneToolMessage(t *testing.T) {
	rc := &readCounter{}
	f := newPreviewFixture(t, false, withReadCounter(rc))
	calls := map[int]string{}
	tools := toolMessages(t, f)
	for _, c := range f.out.Citations {
		assert.NotEmpty(t, c.CallID, "citation %d names its tool call", c.N)
		calls[c.N] = c.CallID
		assert.Equal(t, tools[c.CallID].ID, c.MessageID, "citation %d names its call's stored tool message", c.N)
	}
	assert.Equal(t, map[int]string{1: "call_1", 2: "call_2", 3: "call_2"}, calls)
	stored, err := f.e.st.GetMessage(context.Background(), f.out.FinalMessageID)
	require.NoError(t, err)
	assert.Equal(t, f.out.Citations, citations.FromMetadata(stored.Metadata), "the stored record is the run's")

	// previewAll previews citations 1–3 with the counter reset; refuseRun makes a read of the
	// whole run fail.
	previewAll := func(refuseRun bool) map[int]map[string]any {
		rc.reset()
		rc.mu.Lock()
		rc.refuseRun = refuseRun
		rc.mu.Unlock()
		out := map[int]map[string]any{}
		for n := 1; n <= 3; n++ {
			status, _, p := f.preview(t, n, "")
			require.Equal(t, http.StatusOK, status, p)
			out[n] = p
		}
		return out
	}
	byID := previewAll(true)
	assert.Equal(t, 6, rc.n("GetMessage"), "per preview: the answer and its tool message, by id")
	assert.Zero(t, rc.n("GetToolResult"))
	assert.Zero(t, rc.n("ListRunMessages"))
	assert.Zero(t, rc.n("ListMessages"))

	// A record that names only the call (written before citations named their message).
	setCitations(t, f, func(c *citations.Citation) { c.MessageID = 0 })
	newPath := previewAll(true)
	assert.Equal(t, 3, rc.n("GetMessage"), "one answer read per preview")
	assert.Equal(t, 3, rc.n("GetToolResult"), "one tool message per preview")
	assert.Zero(t, rc.n("ListRunMessages"))
	assert.Zero(t, rc.n("ListMessages"))
	assert.Equal(t, byID, newPath, "the same previews through the call")

	// A record written before citations named their call: the run is read, the answer is the same.
	setCitations(t, f, func(c *citations.Citation) { c.CallID, c.MessageID = "", 0 })
	assert.Equal(t, newPath, previewAll(false), "the same previews either way")
	assert.Equal(t, 3, rc.n("ListRunMessages"), "old records rebuild the run's registry")
	assert.Zero(t, rc.n("GetToolResult"))

	// The message id alone is enough.
	setCitations(t, f, func(c *citations.Citation) { c.MessageID = tools[calls[c.N]].ID })
	assert.Equal(t, newPath, previewAll(true))
	assert.Equal(t, 6, rc.n("GetMessage"), "the answer and the tool message")
	assert.Zero(t, rc.n("GetToolResult"))
	assert.Zero(t, rc.n("ListRunMessages"))
}

// TestPreviewToolMessageMismatch: a citation whose named tool message does not hold its source,
// or holds a different excerpt than the record's digest, or is not a tool result of its run, is
// not found (no other source's text is shown).
func TestPreviewToolMessageMismatch(t *testing.T) {
	f := newPreviewFixture(t, false)
	tools := toolMessages(t, f)
	user, err := f.e.st.GetMessage(context.Background(), f.out.UserMessageID)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		edit func(c *citations.Citation)
	}{
		{"the other tool call", func(c *citations.Citation) {
			c.CallID = map[string]string{"call_1": "call_2", "call_2": "call_1"}[c.CallID]
		}},
		{"a call the run never made", func(c *citations.Citation) { c.CallID = "call_9" }},
		{"another excerpt's digest", func(c *citations.Citation) { c.Digest = citations.Digest("something else") }},
		{"the other tool message", func(c *citations.Citation) {
			c.MessageID = tools[map[string]string{"call_1": "call_2", "call_2": "call_1"}[c.CallID]].ID
			c.CallID = ""
		}},
		{"not a tool message", func(c *citations.Citation) { c.MessageID, c.CallID = user.ID, "" }},
		{"a missing message", func(c *citations.Citation) { c.MessageID, c.CallID = 1<<40, "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setCitations(t, f, func(c *citations.Citation) {
				c.CallID = map[int]string{1: "call_1", 2: "call_2", 3: "call_2"}[c.N]
				c.MessageID = 0
				c.Digest = f.out.Citations[c.N-1].Digest
				tc.edit(c)
			})
			for n := 1; n <= 3; n++ {
				status, _, body := f.e.do("GET", "/api/messages/"+itoa(int(f.out.FinalMessageID))+"/citations/"+itoa(n)+"/preview", f.tok, nil)
				assert.Equal(t, http.StatusNotFound, status, "citation %d: %s", n, body)
				assert.JSONEq(t, `{"error":{"code":"not_found","message":"not found"}}`, body)
			}
		})
	}
}

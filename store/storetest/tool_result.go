package storetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// testGetToolResult: a run's result of one tool call is found by run and call id, the first one
// when a call was answered twice; another run's result of a call with the same id, a call the run
// never made and a missing run are ErrNotFound.
func testGetToolResult(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "u1")
	add := func(m store.Message) store.Message {
		t.Helper()
		m.SessionID = sess.ID
		got, err := s.AppendMessage(ctx, m)
		require.NoError(t, err)
		return got
	}
	var runs [2]store.Run
	var want [2][2]store.Message
	for i := range runs {
		u := add(store.Message{Role: store.RoleUser, Content: "q"})
		r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: u.ID})
		require.NoError(t, err)
		runs[i] = r
		add(store.Message{RunID: r.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search"}, {ID: "c2", Name: "open_web_page"}}})
		ms, err := s.AppendMessages(ctx, []store.Message{
			{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, ToolCallID: "c1", ToolName: "web_search", Content: `{"results":[]}`},
			{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, ToolCallID: "c2", ToolName: "open_web_page", Content: `{"url":"https://a.example/","content":"x"}`},
			{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, ToolCallID: "c2", ToolName: "open_web_page", Content: "a second answer to c2"},
		})
		require.NoError(t, err)
		want[i] = [2]store.Message{ms[0], ms[1]}
		add(store.Message{RunID: r.ID, Role: store.RoleAssistant, Content: "answer"})
	}
	for i, r := range runs {
		for j, call := range []string{"c1", "c2"} {
			got, err := s.GetToolResult(ctx, r.ID, call)
			require.NoError(t, err, "run %d call %s", i, call)
			assert.Equal(t, want[i][j].ID, got.ID, "run %d call %s: the run's own first result", i, call)
			assert.Equal(t, want[i][j].Content, got.Content)
			assert.Equal(t, store.RoleTool, got.Role)
			assert.Equal(t, call, got.ToolCallID)
			assert.Equal(t, r.ID, got.RunID)
		}
	}
	for _, c := range [][2]string{{runs[0].ID, "c3"}, {"no-such-run", "c1"}, {"", "c1"}, {runs[0].ID, ""}} {
		_, err := s.GetToolResult(ctx, c[0], c[1])
		require.ErrorIs(t, err, store.ErrNotFound, "run %q call %q", c[0], c[1])
	}
}

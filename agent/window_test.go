package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// seedTurns appends n earlier turns (question, tool traffic, answer with a marker) to a session.
func seedTurns(t *testing.T, st *store.Store, sid string, n int, answer func(i int) string) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		for _, m := range []store.Message{
			{Role: store.RoleUser, Content: fmt.Sprintf("问题 %d", i)},
			{Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "web_search", Arguments: "{}"}}},
			{Role: store.RoleTool, ToolName: "web_search", ToolCallID: "c", Content: `{"results":[]}`},
			{Role: store.RoleAssistant, Content: answer(i)},
		} {
			m.SessionID = sid
			m.RunID = fmt.Sprintf("seed%d", i)
			_, err := st.AppendMessage(ctx, m)
			require.NoError(t, err)
		}
	}
}

func TestHistoryWindowIsBounded(t *testing.T) {
	tests := []struct {
		name   string
		turns  int
		answer func(i int) string
		want   int // history messages the model gets
	}{
		{"short messages: the newest maxHistoryMessages", 200, func(i int) string { return fmt.Sprintf("答案 %d[^1^]", i) }, maxHistoryMessages},
		// Each answer is 5,000 characters: the newest answer, its question, the answer before it
		// and its question fit in 12,000; the third answer does not.
		{"long answers: the character budget", 50, func(i int) string { return fmt.Sprintf("%d", i) + strings.Repeat("长", 4999) }, 4},
		{"few turns: all of them", 3, func(i int) string { return fmt.Sprintf("答案 %d", i) }, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t)
			sid := newSession(t, st)
			seedTurns(t, st, sid, tc.turns, tc.answer)
			llm := newFakeLLM(t, textStream("好的。"))
			a := newAgent(t, Config{Store: st, Model: llm.model(t)})
			out := run(t, a, sid, "新问题", nil)
			require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)

			msgs := llm.messages(0)
			require.Equal(t, "system", msgs[0]["role"])
			require.Equal(t, "新问题", msgs[len(msgs)-1]["content"], "the turn's own question comes last, once")
			history := msgs[1 : len(msgs)-1]
			require.Len(t, history, tc.want)
			total := 0
			for i, m := range history {
				content := m["content"].(string)
				total += utf8.RuneCountInString(content)
				assert.NotContains(t, content, "[^", "markers of earlier runs are stripped")
				assert.Nil(t, m["tool_calls"], "no tool traffic")
				// Oldest first, and the window ends with the newest answer.
				k := tc.turns - len(history)/2 + i/2
				if i%2 == 0 {
					assert.Equal(t, "user", m["role"])
					assert.Equal(t, fmt.Sprintf("问题 %d", k), content)
				} else {
					assert.Equal(t, "assistant", m["role"])
					assert.True(t, strings.HasPrefix(content, fmt.Sprint(k)) || strings.HasPrefix(content, fmt.Sprintf("答案 %d", k)), content)
				}
			}
			assert.LessOrEqual(t, total, historyBudget)
		})
	}
}

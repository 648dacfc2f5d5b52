package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// seedSearch stores sessions chats of one user, each with turns question/tool-call/tool/answer
// quartets (4 index entries per turn), in one transaction per chat so seeding stays fast.
func seedSearch(b *testing.B, chats, turns int) *Store {
	b.Helper()
	s, err := Open(filepath.Join(b.TempDir(), "citegate.db"), Options{Logger: quietLogger()})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	answer := strings.Repeat("年假按工龄计算，满一年五天，满十年十天。[^1^] ", 6)
	tool := `{"query":"年假","results":[{"title":"年假规定","url":"https://hr.example/a","content":"` + strings.Repeat("条款内容 ", 60) + `"}]}`
	for c := range chats {
		sess, err := s.CreateSession(ctx, Session{UserID: "alice", Channel: "desktop", Title: fmt.Sprintf("第 %d 个对话", c)})
		require.NoError(b, err)
		require.NoError(b, s.db.Update(func(tx *bolt.Tx) error {
			for i := range turns {
				for _, m := range []Message{
					{SessionID: sess.ID, Role: RoleUser, Content: fmt.Sprintf("第 %d 个问题：年假有几天？", i)},
					{SessionID: sess.ID, Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "web_search", Arguments: `{"query":"年假"}`}}},
					{SessionID: sess.ID, Role: RoleTool, ToolCallID: "c", ToolName: "web_search", Content: tool},
					{SessionID: sess.ID, Role: RoleAssistant, Content: answer},
				} {
					in, err := s.prepareMessage(m)
					if err != nil {
						return err
					}
					if _, err := s.appendLocked(tx, in); err != nil {
						return err
					}
				}
			}
			return nil
		}))
	}
	return s
}

// BenchmarkSearchSessions measures a search that matches nothing (the worst case: it reads until
// the history or the budget ends) over a small history (2,000 index entries) and a large one
// (40,000), with the default scan budget and, as the baselines, without one and without the
// raw-record pre-filter (every USER message and answer decoded).
func BenchmarkSearchSessions(b *testing.B) {
	for _, tc := range []struct {
		name         string
		chats, turns int
		maxScan      int
		noPrefilter  bool
	}{
		{"entries=2000/budget=default", 50, 10, 0, false},
		{"entries=2000/budget=default/prefilter=off", 50, 10, 0, true},
		{"entries=40000/budget=default", 1000, 10, 0, false},
		{"entries=40000/budget=none", 1000, 10, 1 << 30, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := seedSearch(b, tc.chats, tc.turns)
			searchPrefilter = !tc.noPrefilter
			b.Cleanup(func() { searchPrefilter = true })
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := s.SearchSessions(ctx, "alice", "病假 工资", SearchOptions{MaxScan: tc.maxScan})
				if err != nil || len(res.Hits) != 0 {
					b.Fatal(err, len(res.Hits))
				}
			}
		})
	}
}

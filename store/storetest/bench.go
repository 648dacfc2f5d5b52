package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/citegate/citegate/store"
)

// Bench measures a backend's hot paths with the same workload on every backend, so one run of
// BenchmarkBackends (store package) compares them:
//
//   - AppendMessage: one message appended to a session (each tool result and answer of a turn).
//   - AppendMessageParallel: the same from 8 goroutines over 8 sessions, as many chats at once.
//   - ConcludeRun: a run's end with its final answer and citation metadata, one transaction.
//   - ListDialogBefore/N: the model's history window (the newest 20 dialog messages) in a session
//     of N messages, where three in four are tool traffic; its cost should not grow with N.
func Bench(b *testing.B, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(b)
	content := "A typical answer paragraph with a citation marker [^1^] and some more words to fill it."

	b.Run("AppendMessage", func(b *testing.B) {
		sess := newSession(b, s, "bench-append")
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: content}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendMessageParallel", func(b *testing.B) { appendParallel(b, s, content) })

	b.Run("ConcludeRun", func(b *testing.B) {
		sess := newSession(b, s, "bench-conclude")
		runs := make([]string, b.N)
		for i := range runs {
			r, err := s.CreateRun(ctx, store.Run{SessionID: sess.ID, Channel: "desktop"})
			if err != nil {
				b.Fatal(err)
			}
			runs[i] = r.ID
		}
		meta := json.RawMessage(`{"citations":[{"n":1,"url":"https://a.example/x","title":"A"},{"n":2,"url":"https://b.example/y","title":"B"}],"links":{"hidden":0,"allowed":[]}}`)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			_, _, err := s.ConcludeRun(ctx, store.Conclusion{RunID: runs[i], Phase: store.PhaseCompleted, MarkersSeen: 2, MarkersKept: 2,
				Final: &store.Message{SessionID: sess.ID, RunID: runs[i], Role: store.RoleAssistant, Content: content, Metadata: meta}})
			if err != nil {
				b.Fatal(err)
			}
		}
	})

	for _, n := range []int{200, 5000} {
		sess := newSession(b, s, fmt.Sprintf("bench-dialog-%d", n))
		for i := range n / 4 {
			for _, m := range []store.Message{
				{Role: store.RoleUser, Content: fmt.Sprintf("question %d", i)},
				{Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c", Name: "web_search", Arguments: `{"query":"q"}`}}},
				{Role: store.RoleTool, ToolCallID: "c", ToolName: "web_search", Content: `{"results":[{"title":"t","url":"https://a.example/","content":"` + content + `"}]}`},
				{Role: store.RoleAssistant, Content: content},
			} {
				m.SessionID = sess.ID
				if _, err := s.AppendMessage(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(fmt.Sprintf("ListDialogBefore/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				page, err := s.ListDialogBefore(ctx, sess.ID, 0, 20)
				if err != nil || len(page) != 20 {
					b.Fatalf("page of %d, err %v", len(page), err)
				}
			}
		})
	}
}

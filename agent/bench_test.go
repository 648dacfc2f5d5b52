package agent

import (
	"context"
	"fmt"
	"testing"

	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/store"
)

// BenchmarkRunExtractive measures one whole offline turn: user message, search round with a fake
// web_search, extractive answer streamed in small deltas, final message, phase and citations in one conclusion,
// all on a real bbolt store.
func BenchmarkRunExtractive(b *testing.B) { benchTurns(b, 0) }

// BenchmarkTurnDepth measures the same offline turn in a fresh session and in one that already
// holds 5,000 messages (1,250 earlier turns: user, tool-calling assistant, tool result, answer),
// in the same run. A turn reads a bounded history window newest-first and only its own run's
// messages, so the two should cost the same (issue 8: within 1.3×).
func BenchmarkTurnDepth(b *testing.B) {
	for _, depth := range []int{0, 5000} {
		b.Run(fmt.Sprintf("messages=%d", depth), func(b *testing.B) { benchTurns(b, depth) })
	}
}

// benchTurns measures back-to-back offline turns in a session prefilled with depth messages.
func benchTurns(b *testing.B, depth int) {
	st := openStoreTB(b)
	search, _ := searchTool(hitInvoice, hitTypes, hitLeave)
	a, err := New(Config{Store: st, Model: extractive.New(), Tools: []Tool{search}, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	sid := newSessionTB(b, st)
	prefillSession(b, st, sid, depth)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "电子发票抬头写错了怎么办？"})
		if err != nil {
			b.Fatal(err)
		}
		<-h.Done()
		if o := h.Outcome(); len(o.Citations) == 0 {
			b.Fatalf("no citations: %+v", o)
		}
	}
}

// prefillSession appends n messages to the session in the shape real turns leave behind.
func prefillSession(b *testing.B, st *store.Store, sid string, n int) {
	b.Helper()
	ctx := context.Background()
	tool := searchJSON("电子发票", hitInvoice, hitTypes, hitLeave)
	for i := 0; i < n; i += 4 {
		runID := fmt.Sprintf("prefill%06d", i)
		msgs := []store.Message{
			{SessionID: sid, RunID: runID, Role: store.RoleUser, Content: "之前的问题：电子发票抬头写错了怎么办？"},
			{SessionID: sid, RunID: runID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"电子发票"}`}}},
			{SessionID: sid, RunID: runID, Role: store.RoleTool, Content: tool, ToolCallID: "c1", ToolName: "web_search"},
			{SessionID: sid, RunID: runID, Role: store.RoleAssistant, Content: "抬头写错时，应先申请红冲原发票，再按正确抬头重新开具。[^1^]"},
		}
		for _, m := range msgs {
			if _, err := st.AppendMessage(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
	}
}

package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/citegate/citegate/store"
)

// BenchTurn measures a turn's store work on a backend, the way the agent does it now and the way it
// did before, in the same run (see docs/benchmarks.md):
//
//   - TurnWrites/{five,three}: the writes of one turn with one tool round, from 64 goroutines on
//     64 sessions (concurrent chats, so bbolt's batching shares commits among them). "five" is
//     AppendMessage (question), CreateRun, AppendMessage (tool call), AppendMessage (result),
//     ConcludeRun; "three" is StartTurn, AppendMessages (the round), ConcludeRun. txns/op counts
//     the write transactions a turn asks for.
//   - TurnWritesSerial/{five,three}: the same from one goroutine on one session (a chat alone).
//   - HistoryWindow/{messages,lines}/N: reading a 40-message window (the agent's maxHistoryMessages)
//     newest-first in a session of N messages whose answers carry citation metadata with excerpts:
//     whole messages (ListDialogBefore) against dialog lines (ListDialogLinesBefore).
func BenchTurn(b *testing.B, h Harness) {
	ctx := context.Background()
	question := "电子发票抬头写错了怎么办？需要先红冲再重开吗？"
	answer := strings.Repeat("抬头写错时，应先申请红冲原发票，再按正确抬头重新开具。[^1^]", 6)
	tool := `{"query":"电子发票","results":[` + strings.Repeat(`{"title":"电子发票抬头开错了怎么办","url":"https://kb.example.com/kb/einvoice","content":"`+strings.Repeat("抬头写错时，应先申请红冲原发票。", 20)+`","ref":1},`, 4) + `{"title":"t","url":"https://kb.example.com/x","content":"x","ref":5}],"total_results":5}`
	meta := citationMeta()

	for _, style := range []string{"five", "three"} {
		b.Run("TurnWrites/"+style, func(b *testing.B) {
			// A fresh database for each: a grown file (a longer freelist) would tilt the comparison.
			s, _ := h.openTest(b)
			var next atomic.Int64
			sessions := make([]string, 64)
			for i := range sessions {
				sessions[i] = newSession(b, s, fmt.Sprintf("bench-turn-%s-%d", style, i)).ID
			}
			var txns atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores, as 64 concurrent chats
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				sid := sessions[int(next.Add(1)-1)%len(sessions)]
				for pb.Next() {
					n, err := turnWrites(ctx, s, style, sid, question, tool, answer, meta)
					if err != nil {
						b.Error(err)
						return
					}
					txns.Add(int64(n))
				}
			})
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(txns.Load())/float64(b.N), "txns/op")
		})
	}

	s, _ := h.openTest(b)
	// One chat alone: every write waits for a commit of its own before the next
	// starts, so a turn's latency is the sum over its transactions.
	for _, style := range []string{"five", "three"} {
		b.Run("TurnWritesSerial/"+style, func(b *testing.B) {
			s, _ := h.openTest(b)
			sid := newSession(b, s, "bench-serial-"+style).ID
			txns := 0
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for b.Loop() {
				n, err := turnWrites(ctx, s, style, sid, question, tool, answer, meta)
				if err != nil {
					b.Fatal(err)
				}
				txns += n
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(txns)/float64(b.N), "txns/op")
		})
	}

	for _, n := range []int{200, 5000} {
		sess := newSession(b, s, fmt.Sprintf("bench-window-%d", n))
		for i := 0; i < n; i += 4 {
			m, r, err := s.StartTurn(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: question}, store.Run{})
			if err != nil {
				b.Fatal(err)
			}
			_ = m
			if _, err := s.AppendMessages(ctx, []store.Message{
				{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"电子发票"}`}}},
				{SessionID: sess.ID, RunID: r.ID, Role: store.RoleTool, ToolCallID: "c1", ToolName: "web_search", Content: tool},
			}); err != nil {
				b.Fatal(err)
			}
			if _, _, err := s.ConcludeRun(ctx, store.Conclusion{RunID: r.ID, Phase: store.PhaseCompleted,
				Final: &store.Message{SessionID: sess.ID, RunID: r.ID, Role: store.RoleAssistant, Content: answer, Metadata: meta}}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("HistoryWindow/messages/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				page, err := s.ListDialogBefore(ctx, sess.ID, 0, 40)
				if err != nil || len(page) != 40 {
					b.Fatalf("page of %d, err %v", len(page), err)
				}
			}
		})
		b.Run(fmt.Sprintf("HistoryWindow/lines/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				page, err := s.ListDialogLinesBefore(ctx, sess.ID, 0, 40)
				if err != nil || len(page) != 40 {
					b.Fatalf("page of %d, err %v", len(page), err)
				}
			}
		})
	}
}

// turnWrites performs one turn's writes in the given style and returns how many write
// transactions it asked for.
func turnWrites(ctx context.Context, s store.Backend, style, sid, question, tool, answer string, meta json.RawMessage) (int, error) {
	call := store.Message{SessionID: sid, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"电子发票"}`}}}
	result := store.Message{SessionID: sid, Role: store.RoleTool, ToolCallID: "c1", ToolName: "web_search", Content: tool}
	var runID string
	n := 0
	switch style {
	case "five":
		u, err := s.AppendMessage(ctx, store.Message{SessionID: sid, Role: store.RoleUser, Content: question})
		if err != nil {
			return n, err
		}
		r, err := s.CreateRun(ctx, store.Run{SessionID: sid, Channel: "desktop", UserMessageID: u.ID})
		if err != nil {
			return n, err
		}
		runID = r.ID
		call.RunID, result.RunID = runID, runID
		if _, err := s.AppendMessage(ctx, call); err != nil {
			return n, err
		}
		if _, err := s.AppendMessage(ctx, result); err != nil {
			return n, err
		}
		n = 4
	default:
		_, r, err := s.StartTurn(ctx, store.Message{SessionID: sid, Role: store.RoleUser, Content: question}, store.Run{Channel: "desktop"})
		if err != nil {
			return n, err
		}
		runID = r.ID
		call.RunID, result.RunID = runID, runID
		if _, err := s.AppendMessages(ctx, []store.Message{call, result}); err != nil {
			return n, err
		}
		n = 2
	}
	_, _, err := s.ConcludeRun(ctx, store.Conclusion{RunID: runID, Phase: store.PhaseCompleted, MarkersSeen: 6, MarkersKept: 6,
		Final: &store.Message{SessionID: sid, RunID: runID, Role: store.RoleAssistant, Content: answer, Metadata: meta}})
	return n + 1, err
}

// citationMeta is a final answer's metadata as the agent writes it: two citations with their
// excerpt leads and digests, and the link decision.
func citationMeta() json.RawMessage {
	lead := strings.Repeat("抬头写错时，应先申请红冲原发票，再按正确抬头重新开具。", 8)
	var cits []map[string]any
	for i := 1; i <= 2; i++ {
		cits = append(cits, map[string]any{"n": i, "url": fmt.Sprintf("https://kb.example.com/kb/%d", i), "title": "电子发票抬头开错了怎么办",
			"tool": "web_search", "retrievedAt": "2026-11-30T08:00:00Z", "digest": strings.Repeat("ab", 32), "lead": lead})
	}
	raw, _ := json.Marshal(map[string]any{"citations": cits, "links": map[string]any{"hidden": 0, "allowed": []string{}}})
	return raw
}

package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/citegate/citegate/store"
)

// BenchmarkOperatorConsole measures the operator console (handler CPU, no network) over 10 and 100
// shared 20-message chats, against the baseline of the operator's read-only view of one such share.
// The console reads every shared chat's dialog (a page at a time, tool traffic skipped) and runs on
// each request, so its cost should grow with the number of shares and stay near one view's store
// read per share (it renders no answers).
func BenchmarkOperatorConsole(b *testing.B) {
	for _, c := range []struct {
		name   string
		shares int
		path   func(shareID string) string
	}{
		{"view-1share", 1, func(id string) string { return "/operator/shares/" + id }},
		{"console-10shares", 10, func(string) string { return "/operator" }},
		{"console-100shares", 100, func(string) string { return "/operator" }},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newBenchEnv(b)
			ctx := b.Context()
			_, tok, err := e.st.CreateUserRole(ctx, "op", true, store.Actor{Name: "cli:bench"})
			if err != nil {
				b.Fatal(err)
			}
			owner, _, err := e.st.CreateUser(ctx, "owner")
			if err != nil {
				b.Fatal(err)
			}
			meta := json.RawMessage(`{"citations":[{"n":1,"url":"https://example.com/a","title":"年假规定"}],"links":{"hidden":1,"allowed":[]},"feedback":{"vote":"up"}}`)
			var shareID string
			for i := range c.shares {
				s, err := e.st.CreateSession(ctx, store.Session{UserID: owner.ID, Channel: "desktop", Title: fmt.Sprintf("chat %d", i)})
				if err != nil {
					b.Fatal(err)
				}
				for j := range 10 {
					if _, err := e.st.AppendMessage(ctx, store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprintf("问题 %d", j)}); err != nil {
						b.Fatal(err)
					}
					if _, err := e.st.AppendMessage(ctx, store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "根据**员工手册**，年假按工龄计算[^1^]。", Metadata: meta}); err != nil {
						b.Fatal(err)
					}
				}
				wm, err := e.st.LastMessageID(ctx, s.ID)
				if err != nil {
					b.Fatal(err)
				}
				_, sh, err := e.st.CreateShare(ctx, s.ID, owner.ID, wm)
				if err != nil {
					b.Fatal(err)
				}
				shareID = sh.TokenHash
			}
			h := e.srv.Handler()
			path := c.path(shareID)
			get := func() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("GET", path, nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d", rec.Code)
				}
			}
			get()
			b.ReportAllocs()
			b.ResetTimer()
			before := processCPU()
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}

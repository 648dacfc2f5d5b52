package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/citegate/citegate/store"
)

// BenchmarkShareViewCounting: anonymous views of a small share (one question, one answer) from 8
// concurrent readers, with views batched in memory and written once per interval (what the
// gateway does) against a write transaction per view (the design it avoids), on bbolt with its
// default durability. cpu-ms/op is the process's CPU per view; ns/op the wall time per view
// across all readers.
func BenchmarkShareViewCounting(b *testing.B) {
	for _, mode := range []string{"batched", "write-per-view"} {
		b.Run(mode, func(b *testing.B) {
			e := newBenchEnv(b)
			tok := benchShareSession(b, e, 2)
			sh, err := e.st.GetShare(b.Context(), tok)
			if err != nil {
				b.Fatal(err)
			}
			h := e.srv.Handler()
			view := func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/s/"+tok, nil))
				if rec.Code != http.StatusOK {
					b.Errorf("status %d", rec.Code)
					return
				}
				if mode == "write-per-view" {
					if err := e.st.AddShareViews(b.Context(), []store.ShareViews{{ID: sh.TokenHash, Count: 1, Last: time.Now()}}); err != nil {
						b.Error(err)
					}
				}
			}
			view()
			b.ReportAllocs()
			b.SetParallelism(4) // 4 × GOMAXPROCS readers
			b.ResetTimer()
			before := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					view()
				}
			})
			e.srv.flushViews(b.Context())
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "cpu-ms/op")
			got, err := e.st.GetShare(b.Context(), tok)
			if err != nil {
				b.Fatal(err)
			}
			// Both modes count every view once through the handler; write-per-view adds its own.
			want := uint64(b.N + 1)
			if mode == "write-per-view" {
				want *= 2
			}
			if got.Views != want {
				b.Fatalf("views %d, want %d", got.Views, want)
			}
		})
	}
}

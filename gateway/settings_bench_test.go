package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/citegate/citegate/store"
)

// BenchmarkSharePageViewerLanguage measures what honouring a signed-in viewer's language costs a
// share-page view (200-message chat, warm render cache, handler CPU, no network): an anonymous view
// (Accept-Language only, the code before), a signed-in viewer without a choice, and one whose choice
// is English (the answers then come from the cache's English entries).
func BenchmarkSharePageViewerLanguage(b *testing.B) {
	for _, c := range []struct{ name, lang string }{{"anonymous", "-"}, {"viewer-no-choice", ""}, {"viewer-en", store.LangEN}} {
		b.Run(c.name, func(b *testing.B) {
			e := newBenchEnv(b)
			tok := benchShareSession(b, e, 200)
			var cookie *http.Cookie
			if c.lang != "-" {
				ctx := context.Background()
				u, _, err := e.st.CreateUser(ctx, "viewer")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.st.SetLanguage(ctx, u.ID, c.lang); err != nil {
					b.Fatal(err)
				}
				sess, err := e.st.CreateWebSession(ctx, u.ID, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				cookie = &http.Cookie{Name: CookieName, Value: sess}
			}
			h := e.srv.Handler()
			view := func() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("GET", "/s/"+tok, nil)
				req.Header.Set("Accept-Language", "zh-CN")
				if cookie != nil {
					req.AddCookie(cookie)
				}
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d", rec.Code)
				}
			}
			view() // warm the render cache in this viewer's language
			b.ReportAllocs()
			b.ResetTimer()
			before := processCPU()
			for b.Loop() {
				view()
			}
			b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}

package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/citegate/citegate/store"
)

// BenchmarkChatFirstRender measures the server side of opening a 200-message chat in the desktop
// view (issue 10: ≤ 100 ms): the app shell (GET /) plus session.open answered with the newest
// history page, over a real loopback websocket, from a cold render cache (every answer rendered)
// and a warm one; and the same page as a reload of /?s=<id> gets it now (the newest page rendered
// into the shell, then session.open with newest, answered session.unchanged). GET
// /api/sessions/{id}/messages (all 200, rendered) is the comparison.
func BenchmarkChatFirstRender(b *testing.B) {
	e := newBenchEnv(b)
	ctx := b.Context()
	u, tok, err := e.st.CreateUser(ctx, "perf")
	if err != nil {
		b.Fatal(err)
	}
	s, err := e.st.CreateSession(ctx, store.Session{UserID: u.ID, Channel: "desktop", Title: "perf"})
	if err != nil {
		b.Fatal(err)
	}
	meta := json.RawMessage(`{"citations":[{"n":1,"url":"https://example.com/a","title":"年假规定"},{"n":2,"url":"https://example.com/b","title":"请假流程"}],"links":{"hidden":0,"allowed":[]}}`)
	answer := "## 年假天数\n\n根据**员工手册**，年假天数按工龄计算[^1^]；申请需提前三天在系统提交[^2^]。\n\n" +
		"| 工龄 | 年假 |\n| --- | --- |\n| 1–10 年 | 5 天 |\n| 10 年以上 | 10 天 |\n\n" +
		"1. 登录系统\n2. 选择「请假」\n3. 提交审批[^2^]\n\n```bash\ncurl -s https://hr.example.com/api/leave\n```\n"
	var newest uint64
	for i := range 100 {
		if _, err := e.st.AppendMessage(ctx, store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprintf("第 %d 个问题：年假有几天？", i)}); err != nil {
			b.Fatal(err)
		}
		// Each answer differs a little, so the cold case renders 100 distinct answers.
		a, err := e.st.AppendMessage(ctx, store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: fmt.Sprintf("第 %d 条。", i) + answer, Metadata: meta})
		if err != nil {
			b.Fatal(err)
		}
		newest = a.ID
	}
	ts := httptest.NewServer(e.srv.Handler())
	b.Cleanup(ts.Close)
	hdr := http.Header{"Authorization": {"Bearer " + tok}}
	get := func(path string) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		req.Header = hdr.Clone()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d", path, res.StatusCode)
		}
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http")+"/ws", hdr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.Close() })
	open := func() int {
		if err := ws.WriteJSON(map[string]string{"type": "session.open", "sessionId": s.ID}); err != nil {
			b.Fatal(err)
		}
		for {
			var f struct {
				Type     string            `json:"type"`
				Messages []json.RawMessage `json:"messages"`
			}
			if err := ws.ReadJSON(&f); err != nil {
				b.Fatal(err)
			}
			if f.Type == "session.history" {
				return len(f.Messages)
			}
		}
	}
	for _, cached := range []bool{false, true} {
		name := "shell+session.open/cold"
		if cached {
			name = "shell+session.open/warm"
		}
		b.Run(name, func(b *testing.B) {
			n := 0
			before := processCPU()
			for b.Loop() {
				if !cached {
					e.srv.renders = newRenderCache(0)
				}
				get("/")
				n = open()
			}
			// CPU time of the whole process (server and this client) per open: unlike wall time it
			// does not grow with the other processes on a shared machine.
			b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "cpu-ms/op")
			b.ReportMetric(float64(n), "msgs/page")
		})
	}
	// The page as a reload of /?s=<id> gets it now: the shell with the newest page rendered in
	// (firstPage), then session.open with newest, answered session.unchanged.
	unchanged := func() {
		if err := ws.WriteJSON(map[string]any{"type": "session.open", "sessionId": s.ID, "newest": newest}); err != nil {
			b.Fatal(err)
		}
		for {
			var f struct {
				Type string `json:"type"`
			}
			if err := ws.ReadJSON(&f); err != nil {
				b.Fatal(err)
			}
			if f.Type == "session.unchanged" {
				return
			}
			if f.Type == "session.history" {
				b.Fatal("session.open with newest sent the page again")
			}
		}
	}
	for _, cached := range []bool{false, true} {
		name := "shell-with-first-page+session.open-newest/cold"
		if cached {
			name = "shell-with-first-page+session.open-newest/warm"
		}
		b.Run(name, func(b *testing.B) {
			before := processCPU()
			for b.Loop() {
				if !cached {
					e.srv.renders = newRenderCache(0)
				}
				get("/?s=" + s.ID)
				unchanged()
			}
			b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
	b.Run("api-messages-all/cold", func(b *testing.B) {
		before := processCPU()
		for b.Loop() {
			e.srv.renders = newRenderCache(0)
			get("/api/sessions/" + s.ID + "/messages")
		}
		b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e6, "cpu-ms/op")
	})
	e.srv.renders = newRenderCache(defaultRenderCacheBytes)
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// benchServer is a gateway on a real store and agent (extractive model over the bundled corpus),
// served on loopback.
type benchServer struct {
	st  *store.Store
	ag  *agent.Agent
	srv *Server
	ts  *httptest.Server
}

func newBenchServer(b *testing.B, model func(agent.Model) agent.Model) *benchServer {
	b.Helper()
	dir := b.TempDir()
	st, err := store.Open(filepath.Join(dir, "citegate.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	public := "http://" + ts.Listener.Addr().String()
	corpus, err := tools.LoadCorpus("", public)
	if err != nil {
		b.Fatal(err)
	}
	m := extractive.New()
	if model != nil {
		m = model(m)
	}
	ag, err := agent.New(agent.Config{Store: st, Model: m, Tools: []agent.Tool{tools.NewWebSearch(corpus, nil)}})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{Addr: "127.0.0.1:0", PublicURL: public, Store: st, Agent: ag, Registry: prometheus.NewRegistry(), ChatRatePerMinute: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	ts.Config.Handler = srv.Handler()
	ts.Start()
	bs := &benchServer{st: st, ag: ag, srv: srv, ts: ts}
	b.Cleanup(func() {
		srv.Close()
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ag.Close(ctx)
		_ = st.Close()
	})
	return bs
}

var benchDialer = &websocket.Dialer{ReadBufferSize: 1024, WriteBufferSize: 1024, HandshakeTimeout: 10 * time.Second}

func wsURL(httpURL string) string { return "ws" + strings.TrimPrefix(httpURL, "http") + "/ws" }

type memSnap struct{ heap, stack uint64 }

func snapMem() memSnap {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSnap{heap: ms.HeapInuse, stack: ms.StackInuse}
}

const idleClients = 1000

// BenchmarkIdleClients connects 1,000 idle websocket clients over loopback and reports the memory
// each costs (server and client side together, both being in this process): HeapInuse delta and
// HeapInuse+StackInuse delta per client. Run with -benchtime=1x.
func BenchmarkIdleClients(b *testing.B) {
	b.Run("gateway", func(b *testing.B) {
		bs := newBenchServer(b, nil)
		toks := make([]string, idleClients)
		for i := range toks {
			_, tok, err := bs.st.CreateUser(context.Background(), fmt.Sprintf("u%d", i))
			if err != nil {
				b.Fatal(err)
			}
			toks[i] = tok
		}
		b.ReportAllocs()
		for b.Loop() {
			idleRound(b, wsURL(bs.ts.URL), toks, func() int {
				bs.srv.hub.mu.RLock()
				defer bs.srv.hub.mu.RUnlock()
				return bs.srv.hub.count
			})
		}
	})
	b.Run("baseline-bare-gorilla", func(b *testing.B) {
		// The smallest useful websocket server: upgrade and one read loop per connection.
		var mu sync.Mutex
		n := 0
		up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024}
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			defer func() { mu.Lock(); n--; mu.Unlock() }()
			for {
				if _, _, err := c.ReadMessage(); err != nil {
					c.Close()
					return
				}
			}
		}))
		defer ts.Close()
		toks := make([]string, idleClients)
		b.ReportAllocs()
		for b.Loop() {
			idleRound(b, wsURL(ts.URL), toks, func() int { mu.Lock(); defer mu.Unlock(); return n })
		}
	})
}

func idleRound(b *testing.B, url string, toks []string, registered func() int) {
	b.Helper()
	before := snapMem()
	conns := make([]*websocket.Conn, 0, len(toks))
	for _, tok := range toks {
		h := http.Header{}
		if tok != "" {
			h.Set("Authorization", "Bearer "+tok)
		}
		c, _, err := benchDialer.Dial(url, h)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(30 * time.Second)
	for registered() < len(toks) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d clients registered", registered(), len(toks))
		}
		time.Sleep(5 * time.Millisecond)
	}
	after := snapMem()
	heap := float64(int64(after.heap)-int64(before.heap)) / float64(len(toks))
	total := float64(int64(after.heap+after.stack)-int64(before.heap+before.stack)) / float64(len(toks))
	b.ReportMetric(heap/1024, "heap-KiB/client")
	b.ReportMetric(total/1024, "heap+stack-KiB/client")
	for _, c := range conns {
		c.Close()
	}
	for registered() > 0 && time.Now().Before(deadline.Add(30*time.Second)) {
		time.Sleep(5 * time.Millisecond)
	}
}

// emission is when the model produced the marker-free text up to offset end of its answer.
type emission struct {
	end int
	at  time.Time
}

// timedModel wraps a Model and records, per question, when each piece of marker-free answer text
// was emitted by the model (the same Stripper the agent uses decides when text becomes visible).
type timedModel struct {
	inner agent.Model
	// pace, when set, is the time between two deltas, as a model streaming tokens at a steady rate
	// would space them; zero emits them as fast as the extractive model can.
	pace time.Duration
	mu   sync.Mutex
	rec  map[string][]emission
}

func (m *timedModel) Name() string { return m.inner.Name() }

func (m *timedModel) Generate(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (agent.ModelResponse, error) {
	q := ""
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			q = msg.Content
		}
	}
	var sp citations.Stripper
	total := 0
	record := func(out string) {
		if out == "" {
			return
		}
		total += len(out)
		m.mu.Lock()
		m.rec[q] = append(m.rec[q], emission{end: total, at: time.Now()})
		m.mu.Unlock()
	}
	resp, err := m.inner.Generate(ctx, req, func(d string) {
		if m.pace > 0 {
			time.Sleep(m.pace)
		}
		record(sp.Push(d))
		onDelta(d)
	})
	record(sp.Flush())
	return resp, err
}

func (m *timedModel) emittedAt(q string, end int) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.rec[q] {
		if e.end >= end {
			return e.at, true
		}
	}
	return time.Time{}, false
}

const latencySessions = 200

// BenchmarkDeltaLatency measures the time from the model emitting answer text to a websocket
// client receiving the answer.delta frame holding it, with 200 sessions (200 users, one client
// each) running at once on the extractive model. Reports p50-ms and p99-ms over all deltas.
func BenchmarkDeltaLatency(b *testing.B) {
	b.Run("gateway", func(b *testing.B) { benchGatewayLatency(b, 0, 0) })
	// Paced: every session streams like a model producing ~50 deltas a second, and the 200 sessions
	// start spread over half a second, so the figure is the gateway's delivery latency under a steady
	// load of ~10,000 deltas/s rather than the queueing of 200 simultaneous bursts on 2 cores.
	b.Run("gateway-paced-50-deltas-per-s", func(b *testing.B) { benchGatewayLatency(b, 20*time.Millisecond, 500*time.Millisecond) })
	b.Run("gateway-separate-client-process", func(b *testing.B) { benchSeparateClients(b, 0, 0) })
	// The paced load with the clients in a process of their own: the clients' goroutines no longer
	// wait behind the server's in one Go scheduler (see the latency notes in docs/benchmarks.md).
	b.Run("gateway-paced-separate-client-process", func(b *testing.B) {
		benchSeparateClients(b, 20*time.Millisecond, 500*time.Millisecond)
	})
	b.Run("baseline-bare-push", func(b *testing.B) {
		// A bare gorilla server pushing the same number of small timestamped frames per connection
		// from one goroutine each, as fast as it can: the floor for loopback websocket delivery.
		const framesPerConn = 16
		up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024}
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
				for range framesPerConn {
					f, _ := json.Marshal(map[string]any{"type": "answer.delta", "text": "电子发票", "t": time.Now().UnixNano()})
					if err := c.WriteMessage(websocket.TextMessage, f); err != nil {
						return
					}
				}
			}
		}))
		defer ts.Close()
		conns := make([]*websocket.Conn, latencySessions)
		for i := range conns {
			c, _, err := benchDialer.Dial(wsURL(ts.URL), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			conns[i] = c
		}
		var lat []time.Duration
		b.ReportAllocs()
		for b.Loop() {
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, c := range conns {
				wg.Go(func() {
					if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"go"}`)); err != nil {
						b.Error(err)
						return
					}
					local := make([]time.Duration, 0, framesPerConn)
					for range framesPerConn {
						_, data, err := c.ReadMessage()
						if err != nil {
							b.Error(err)
							return
						}
						now := time.Now()
						var f struct{ T int64 }
						_ = json.Unmarshal(data, &f)
						local = append(local, now.Sub(time.Unix(0, f.T)))
					}
					mu.Lock()
					lat = append(lat, local...)
					mu.Unlock()
				})
			}
			wg.Wait()
		}
		reportPercentiles(b, lat)
	})
}

// benchGatewayLatency runs latencySessions sessions on the extractive model through the gateway and
// reports delta latency percentiles; pace spaces the model's deltas, stagger spreads the session starts.
func benchGatewayLatency(b *testing.B, pace, stagger time.Duration) {
	tm := &timedModel{rec: map[string][]emission{}, pace: pace}
	bs := newBenchServer(b, func(m agent.Model) agent.Model { tm.inner = m; return tm })
	conns := make([]*websocket.Conn, latencySessions)
	for i := range conns {
		_, tok, err := bs.st.CreateUser(context.Background(), fmt.Sprintf("u%d", i))
		if err != nil {
			b.Fatal(err)
		}
		h := http.Header{}
		h.Set("Authorization", "Bearer "+tok)
		c, _, err := benchDialer.Dial(wsURL(bs.ts.URL), h)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	var lat []time.Duration
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		round++
		lat = append(lat, latencyRound(b, conns, round, tm, stagger)...)
	}
	reportPercentiles(b, lat)
	if mfs, err := bs.srv.reg.Gather(); err == nil {
		for _, mf := range mfs {
			if mf.GetName() == "citegate_answer_delta_latency_seconds" {
				// The gateway's own share: event → frame written to the connection.
				h := mf.GetMetric()[0].GetHistogram()
				for _, bk := range h.GetBucket() {
					if bk.GetUpperBound() == 0.005 {
						b.ReportMetric(100*float64(bk.GetCumulativeCount())/float64(h.GetSampleCount()), "server-written-within-5ms-%")
					}
				}
			}
		}
	}
}

// latencyRound sends one question per connection at once and collects the delta latencies.
func latencyRound(b *testing.B, conns []*websocket.Conn, round int, tm *timedModel, stagger time.Duration) []time.Duration {
	b.Helper()
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range conns {
		q := fmt.Sprintf("电子发票抬头写错了怎么办？（会话 %d / 第 %d 轮）", i, round)
		delay := time.Duration(0)
		if stagger > 0 {
			delay = stagger * time.Duration(i) / time.Duration(len(conns))
		}
		wg.Go(func() {
			<-start
			time.Sleep(delay)
			if err := c.WriteJSON(map[string]any{"type": "chat.send", "text": q}); err != nil {
				b.Error(err)
				return
			}
			got := 0
			var local []time.Duration
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			for {
				_, data, err := c.ReadMessage()
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				var f struct{ Type, Text, Phase string }
				if err := json.Unmarshal(data, &f); err != nil {
					b.Error(err)
					return
				}
				switch f.Type {
				case "answer.delta":
					got += len(f.Text)
					at, ok := tm.emittedAt(q, got)
					if !ok {
						b.Errorf("delta without a recorded emission (q=%q, offset %d)", q, got)
						return
					}
					local = append(local, now.Sub(at))
				case "run.finished":
					if f.Phase != "COMPLETED" {
						b.Errorf("run ended %s", f.Phase)
					}
					mu.Lock()
					all = append(all, local...)
					mu.Unlock()
					return
				case "error":
					b.Errorf("error frame: %s", data)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return all
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	b.Helper()
	if len(lat) == 0 {
		b.Fatal("no latencies measured")
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(p * float64(len(lat)-1))
		return float64(lat[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(len(lat))/float64(b.N), "deltas/op")
}

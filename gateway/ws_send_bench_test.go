package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/citegate/citegate/agent"
)

// BenchmarkSendPath measures the gateway's per-frame and per-chunk work: one op is one run's
// events as a fast model emits them (run.started, a tool call, 300 answer chunks of three
// characters, run.finished), fed to the hub the way the agent does, routed to 8 websocket
// connections of the session's owner and written to loopback sockets, until every connection has
// read run.finished. It reports frames/op (frames written over all connections) beside ns/op and
// allocs/op (server and the in-process readers together). The baseline, in the same run, routes
// every chunk as it comes and writes every frame with its own system call: the send path before
// delta joining and write batching.
func BenchmarkSendPath(b *testing.B) {
	b.Run("baseline-per-chunk-unbatched", func(b *testing.B) { benchSendPath(b, 0, true) })
	b.Run("joined-batched", func(b *testing.B) { benchSendPath(b, deltaFlushGap, false) })
}

const sendPathConns = 8

func benchSendPath(b *testing.B, gap time.Duration, unbatched bool) {
	bs := newBenchServer(b, nil)
	h := bs.srv.hub
	h.deltas.gap = gap
	h.unbatched = unbatched
	h.live.after = func(time.Duration, func()) {} // answer.html renders are not the send path
	u, tok, err := bs.st.CreateUser(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	const session = "s-bench"
	h.owners.set(session, u.ID)
	var frames atomic.Int64
	finished := make(chan struct{}, sendPathConns)
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+tok)
	for range sendPathConns {
		c, _, err := benchDialer.Dial(wsURL(bs.ts.URL), hdr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		go func() {
			var buf bytes.Buffer
			for {
				_, r, err := c.NextReader()
				if err != nil {
					return
				}
				buf.Reset()
				if _, err := io.Copy(&buf, r); err != nil {
					return
				}
				frames.Add(1)
				if bytes.HasPrefix(buf.Bytes(), []byte(`{"type":"run.finished"`)) {
					finished <- struct{}{}
				}
			}
		}()
	}
	for len(h.clientsOf(u.ID)) < sendPathConns {
		time.Sleep(time.Millisecond)
	}
	chunks := make([]string, 300)
	for i := range chunks {
		chunks[i] = []string{"电子发", "票抬头", "写错了", "，可以", "申请重", "开。"}[i%6]
	}
	n := 0
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for b.Loop() {
		n++
		run := fmt.Sprintf("r%d", n)
		ev := func(typ agent.EventType) agent.Event {
			return agent.Event{Type: typ, SessionID: session, RunID: run, Channel: "desktop", At: time.Now()}
		}
		h.onEvent(ev(agent.EventRunStarted))
		t := ev(agent.EventToolStarted)
		t.CallID, t.Tool, t.Arguments = "call_1", "web_search", `{"query":"发票"}`
		h.onEvent(t)
		t.Type, t.OK = agent.EventToolFinished, true
		h.onEvent(t)
		for _, c := range chunks {
			d := ev(agent.EventAnswerDelta)
			d.Text = c
			h.onEvent(d)
		}
		f := ev(agent.EventRunFinished)
		f.Phase = "COMPLETED"
		h.onEvent(f)
		for range sendPathConns {
			select {
			case <-finished:
			case <-time.After(30 * time.Second):
				b.Fatal("run.finished did not reach every connection")
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(frames.Load())/float64(n), "frames/op")
	// Wall time on a shared machine includes waiting; the process's CPU time (server and readers
	// together) is the comparable cost.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(n), "cpu-µs/op")
	if !strings.Contains(b.Name(), "baseline") && frames.Load() > int64(n*sendPathConns*10) {
		b.Errorf("%d frames for %d runs: joining did not happen", frames.Load(), n)
	}
}

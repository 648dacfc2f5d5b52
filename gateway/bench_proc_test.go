package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/citegate/citegate/agent"
)

// latencyJob is what the parent benchmark hands the client process.
type latencyJob struct {
	URL    string   `json:"url"`
	Tokens []string `json:"tokens"`
	Round  int      `json:"round"`
	// Stagger spreads the clients' sends over this long, as in the in-process paced variant.
	Stagger time.Duration `json:"stagger"`
}

// latencySample is one answer.delta as the client process saw it.
type latencySample struct {
	Client int   `json:"client"`
	End    int   `json:"end"`  // marker-free answer bytes received so far, this delta included
	AtNano int64 `json:"at"`   // wall clock at receipt
	Done   bool  `json:"done"` // run.finished received (End, AtNano unused)
}

func latencyQuestion(i, round int) string {
	return fmt.Sprintf("电子发票抬头写错了怎么办？（会话 %d / 第 %d 轮）", i, round)
}

// TestLatencyClientProcess is not a test: BenchmarkDeltaLatency runs the test binary again with
// CITEGATE_LATENCY_CLIENT=1 to host the websocket clients in a process of their own, so that the
// clients' scheduling does not compete with the server's goroutines for the same Go scheduler.
func TestLatencyClientProcess(t *testing.T) {
	if os.Getenv("CITEGATE_LATENCY_CLIENT") != "1" {
		t.Skip("helper process for BenchmarkDeltaLatency/gateway-separate-client-process")
	}
	in := bufio.NewReader(os.Stdin)
	var job latencyJob
	if err := json.NewDecoder(in).Decode(&job); err != nil {
		t.Fatal(err)
	}
	conns := make([]*websocket.Conn, len(job.Tokens))
	for i, tok := range job.Tokens {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+tok)
		c, _, err := benchDialer.Dial(job.URL, h)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	emit := func(s latencySample) {
		b, _ := json.Marshal(s)
		mu.Lock()
		out.Write(append(b, '\n'))
		mu.Unlock()
	}
	fmt.Fprintln(out, `{"ready":true}`)
	out.Flush()
	if _, err := in.ReadString('\n'); err != nil { // "go"
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		delay := job.Stagger * time.Duration(i) / time.Duration(len(conns))
		wg.Go(func() {
			defer emit(latencySample{Client: i, Done: true})
			time.Sleep(delay)
			if err := c.WriteJSON(map[string]any{"type": "chat.send", "text": latencyQuestion(i, job.Round)}); err != nil {
				return
			}
			got := 0
			_ = c.SetReadDeadline(time.Now().Add(120 * time.Second))
			for {
				_, data, err := c.ReadMessage()
				if err != nil {
					return
				}
				at := time.Now().UnixNano()
				var f struct{ Type, Text string }
				if json.Unmarshal(data, &f) != nil {
					return
				}
				switch f.Type {
				case "answer.delta":
					got += len(f.Text)
					emit(latencySample{Client: i, End: got, AtNano: at})
				case "run.finished", "error":
					return
				}
			}
		})
	}
	wg.Wait()
	out.Flush()
}

// benchSeparateClients runs the 200 clients in a child process (see TestLatencyClientProcess);
// pace and stagger are as in benchGatewayLatency.
func benchSeparateClients(b *testing.B, pace, stagger time.Duration) {
	tm := &timedModel{rec: map[string][]emission{}, pace: pace}
	bs := newBenchServer(b, func(m agent.Model) agent.Model { tm.inner = m; return tm })
	toks := make([]string, latencySessions)
	for i := range toks {
		_, tok, err := bs.st.CreateUser(context.Background(), fmt.Sprintf("u%d", i))
		if err != nil {
			b.Fatal(err)
		}
		toks[i] = tok
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		round++
		cmd := exec.Command(exe, "-test.run=^TestLatencyClientProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CITEGATE_LATENCY_CLIENT=1", "GOMAXPROCS=2")
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		if err := json.NewEncoder(stdin).Encode(latencyJob{URL: wsURL(bs.ts.URL), Tokens: toks, Round: round, Stagger: stagger}); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() {
			b.Fatalf("client process did not get ready: %v", cmd.Wait())
		}
		b.StartTimer()
		if _, err := stdin.Write([]byte("go\n")); err != nil {
			b.Fatal(err)
		}
		done := 0
		for done < latencySessions && sc.Scan() {
			var s latencySample
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				continue // test framework output ("PASS")
			}
			if s.Done {
				done++
				continue
			}
			at, ok := tm.emittedAt(latencyQuestion(s.Client, round), s.End)
			if !ok {
				b.Fatalf("delta without a recorded emission (client %d, offset %d)", s.Client, s.End)
			}
			lat = append(lat, time.Unix(0, s.AtNano).Sub(at))
		}
		b.StopTimer()
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("client process: %v", err)
		}
		if done < latencySessions {
			b.Fatalf("only %d of %d runs finished", done, latencySessions)
		}
		b.StartTimer()
	}
	reportPercentiles(b, lat)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// errorPause is how long a session waits after a turn that got no run.finished.
const errorPause = 100 * time.Millisecond

// runThroughput drives cfg.sessions sessions over cfg.conns connections.
func runThroughput(ctx context.Context, cfg config) (*Report, error) {
	conns := make([]*conn, 0, cfg.conns)
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	users := len(cfg.tokens)
	for j := range cfg.conns {
		// Connection j belongs to user j mod users.
		c, err := dial(ctx, cfg, cfg.tokens[j%users])
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	var lim *rate.Limiter
	if cfg.rate > 0 {
		lim = rate.NewLimiter(rate.Limit(cfg.rate), 1)
	}
	start := time.Now()
	measureFrom := start.Add(cfg.warmup)
	stopAt := time.Time{}
	if cfg.duration > 0 {
		stopAt = measureFrom.Add(cfg.duration)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		counted  []turnResult // turns sent after the warm-up
		complete int
		cpuFrom  cpuSample
		cpuTaken bool
		frames0  frameCounts
	)
	takeCPU := func() {
		// The server's CPU clock and the frame counts start when the first counted turn is sent.
		if !cpuTaken {
			cpuTaken = true
			cpuFrom = sampleCPU(cfg.serverPID)
			frames0 = sumCounts(conns)
		}
	}
	var wg sync.WaitGroup
	for i := range cfg.sessions {
		// Session i is user k's (k = i mod users), on one of k's connections k, k+users, k+2·users …
		k := i % users
		s := newSession(conns[k+users*((i/users)%((cfg.conns-k+users-1)/users))], i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				if lim != nil {
					if lim.Wait(runCtx) != nil {
						return
					}
				}
				now := time.Now()
				if !stopAt.IsZero() && !now.Before(stopAt) || runCtx.Err() != nil {
					return
				}
				inWindow := !now.Before(measureFrom)
				if inWindow {
					mu.Lock()
					takeCPU()
					mu.Unlock()
				}
				r := s.turn(runCtx, cfg.texts[(i+n)%len(cfg.texts)], cfg.turnTimeout)
				if errors.Is(r.err, context.Canceled) && ctx.Err() == nil {
					return // stopped because --turns was reached
				}
				if !inWindow {
					continue
				}
				mu.Lock()
				counted = append(counted, r)
				if r.completed() {
					complete++
				}
				reached := cfg.turns > 0 && complete >= cfg.turns
				mu.Unlock()
				if reached {
					cancel()
					return
				}
				if errors.Is(r.err, errConnLost) {
					return
				}
				if r.err != nil {
					// A refusing server (rate limit, restart) is not flooded with retries.
					select {
					case <-runCtx.Done():
						return
					case <-time.After(errorPause):
					}
				}
			}
		}()
	}
	wg.Wait()
	cpuTo := sampleCPU(cfg.serverPID)
	frames1 := sumCounts(conns)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep := newReport(cfg, counted, measureFrom)
	if cpuTaken {
		rep.addCPU(cpuFrom, cpuTo)
	}
	for _, c := range conns {
		rep.StreamFrames += c.streamed.Load()
		rep.DroppedFrames += c.dropped.Load()
	}
	rep.addFrames(frames1.minus(frames0), len(cfg.tokens))
	return rep, nil
}

// runDepth drives one session for cfg.turns turns back to back and compares the latency of its
// first turns with the latency of the turns sent when the session already held more than
// cfg.after messages.
func runDepth(ctx context.Context, cfg config) (*Report, error) {
	c, err := dial(ctx, cfg, cfg.tokens[0])
	if err != nil {
		return nil, err
	}
	defer c.close()
	s := newSession(c, 0)
	start := time.Now()
	cpuFrom := sampleCPU(cfg.serverPID)
	results := make([]turnResult, 0, cfg.turns)
	var first, past []float64
	messages := 0 // the session's messages before the current turn
	for n := range cfg.turns {
		r := s.turn(ctx, cfg.texts[n%len(cfg.texts)], cfg.turnTimeout)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		results = append(results, r)
		if r.err != nil && errors.Is(r.err, errConnLost) {
			return nil, fmt.Errorf("turn %d: %w", n+1, r.err)
		}
		ms := r.latencyMs()
		if r.completed() {
			if n < cfg.firstTurns {
				first = append(first, ms)
			}
			if messages > cfg.after {
				past = append(past, ms)
			}
		}
		messages += turnMessages(r)
	}
	rep := newReport(cfg, results, start)
	rep.addCPU(cpuFrom, sampleCPU(cfg.serverPID))
	rep.StreamFrames = c.streamed.Load()
	rep.DroppedFrames = c.dropped.Load()
	rep.addFrames(c.counts(), 1)
	d := &DepthReport{FirstTurns: len(first), FirstMedianMs: percentile(first, 50), After: cfg.after,
		PastTurns: len(past), PastMedianMs: percentile(past, 50), Messages: messages}
	if d.FirstMedianMs > 0 && d.PastTurns > 0 {
		d.Ratio = d.PastMedianMs / d.FirstMedianMs
	}
	rep.Depth = d
	return rep, nil
}

// turnMessages is how many messages a turn added to its session. Message ids are global and
// strictly increasing, so from the user's message to the final answer the ids span exactly the
// turn's messages when the server has no other traffic; with other traffic this overcounts, and
// a depth run should then be given a session of its own server. A turn without an answer counts 2.
func turnMessages(r turnResult) int {
	if r.userMsg > 0 && r.answerMsg >= r.userMsg {
		return int(r.answerMsg-r.userMsg) + 1
	}
	return 2
}

func (r turnResult) latencyMs() float64 {
	return float64(r.finished.Sub(r.sent)) / float64(time.Millisecond)
}

// sumCounts adds up the frame counts of all connections.
func sumCounts(conns []*conn) frameCounts {
	out := frameCounts{}
	for _, c := range conns {
		for k, v := range c.counts() {
			out[k] += v
		}
	}
	return out
}

// minus is the frames received since earlier.
func (f frameCounts) minus(earlier frameCounts) frameCounts {
	out := frameCounts{}
	for k, v := range f {
		if d := v - earlier[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

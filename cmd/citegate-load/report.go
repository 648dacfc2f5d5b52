package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is what a load run measured. Latencies are milliseconds from chat.send to run.finished.
type Report struct {
	Mode          string   `json:"mode"`
	URL           string   `json:"url"`
	Sessions      int      `json:"sessions"`
	Conns         int      `json:"conns"`
	Rate          float64  `json:"rate,omitempty"`
	Turns         int      `json:"turns"`      // completed turns (run.finished COMPLETED)
	FailedRuns    int      `json:"failedRuns"` // run.finished with another phase
	Errors        int      `json:"errors"`     // no run.finished: error frame, timeout, connection lost
	ErrorSamples  []string `json:"errorSamples,omitempty"`
	Seconds       float64  `json:"seconds"` // from the first counted send to the last counted finish
	TurnsPerSec   float64  `json:"turnsPerSecond"`
	P50Ms         float64  `json:"p50Ms"`
	P90Ms         float64  `json:"p90Ms"`
	P99Ms         float64  `json:"p99Ms"`
	MaxMs         float64  `json:"maxMs"`
	StreamFrames  int64    `json:"streamFrames"`  // answer.delta / tool.* frames received
	DroppedFrames int64    `json:"droppedFrames"` // frames the load generator could not route in time
	// Frames counts every frame received over the measurement, FrameTypes by type. The server sends
	// each frame of a user's session to every connection of the user, so a frame counts once per
	// connection: FramesPerTurn is what all connections received per completed turn, and
	// FramesPerTurnPerConn what one of a user's connections received (FramesPerTurn / ConnsPerUser).
	Users                int              `json:"users"`
	ConnsPerUser         float64          `json:"connsPerUser"`
	Frames               int64            `json:"frames"`
	FramesPerTurn        float64          `json:"framesPerTurn"`
	FramesPerTurnPerConn float64          `json:"framesPerTurnPerConn"`
	FrameTypes           map[string]int64 `json:"frameTypes,omitempty"`
	// ServerCPUMsPerTurn is the server process's user+system CPU time over the measurement divided
	// by the completed turns (needs --server-pid, Linux); ClientCPUMsPerTurn is the load generator's own.
	ServerCPUMsPerTurn *float64     `json:"serverCpuMsPerTurn,omitempty"`
	ClientCPUMsPerTurn *float64     `json:"clientCpuMsPerTurn,omitempty"`
	Depth              *DepthReport `json:"depth,omitempty"`
}

// DepthReport compares the first turns of one session with its turns past message After.
type DepthReport struct {
	FirstTurns    int     `json:"firstTurns"`
	FirstMedianMs float64 `json:"firstMedianMs"`
	After         int     `json:"after"`
	PastTurns     int     `json:"pastTurns"`
	PastMedianMs  float64 `json:"pastMedianMs"`
	Ratio         float64 `json:"ratio"` // past / first; 0 when no turn went past After
	Messages      int     `json:"messages"`
}

func newReport(cfg config, results []turnResult, from time.Time) *Report {
	rep := &Report{Mode: cfg.mode, URL: cfg.url, Sessions: cfg.sessions, Conns: cfg.conns, Rate: cfg.rate}
	var lat []float64
	last := from
	for _, r := range results {
		switch {
		case r.err != nil:
			rep.Errors++
			if len(rep.ErrorSamples) < 5 {
				rep.ErrorSamples = append(rep.ErrorSamples, r.err.Error())
			}
		case r.phase != "COMPLETED":
			rep.FailedRuns++
			if len(rep.ErrorSamples) < 5 {
				rep.ErrorSamples = append(rep.ErrorSamples, "run "+r.phase+": "+r.runErr)
			}
		default:
			rep.Turns++
			lat = append(lat, r.latencyMs())
		}
		if r.finished.After(last) {
			last = r.finished
		}
	}
	rep.Seconds = last.Sub(from).Seconds()
	if rep.Seconds > 0 {
		rep.TurnsPerSec = float64(rep.Turns) / rep.Seconds
	}
	slices.Sort(lat)
	rep.P50Ms, rep.P90Ms, rep.P99Ms = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)
	if len(lat) > 0 {
		rep.MaxMs = lat[len(lat)-1]
	}
	return rep
}

// percentile is the nearest-rank percentile of v (sorted here if needed); 0 for no values.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	if !slices.IsSorted(v) {
		v = slices.Clone(v)
		slices.Sort(v)
	}
	rank := int(math.Ceil(p / 100 * float64(len(v))))
	return v[max(rank-1, 0)]
}

func (r *Report) addCPU(from, to cpuSample) {
	if r.Turns == 0 {
		return
	}
	if from.server >= 0 && to.server >= from.server {
		v := float64(to.server-from.server) / float64(time.Millisecond) / float64(r.Turns)
		r.ServerCPUMsPerTurn = &v
	}
	if from.self >= 0 && to.self >= from.self {
		v := float64(to.self-from.self) / float64(time.Millisecond) / float64(r.Turns)
		r.ClientCPUMsPerTurn = &v
	}
}

// addFrames records the frames received over the measurement by users' connections.
func (r *Report) addFrames(counts frameCounts, users int) {
	r.Users = users
	r.ConnsPerUser = float64(r.Conns) / float64(max(users, 1))
	r.FrameTypes = counts
	for _, n := range counts {
		r.Frames += n
	}
	if r.Turns > 0 {
		r.FramesPerTurn = float64(r.Frames) / float64(r.Turns)
		r.FramesPerTurnPerConn = r.FramesPerTurn / r.ConnsPerUser
	}
}

func (r *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *Report) writeText(w io.Writer) {
	pace := "back to back"
	if r.Rate > 0 {
		pace = fmt.Sprintf("at %.0f turns/s", r.Rate)
	}
	fmt.Fprintf(w, "citegate-load %s: %s, %d session(s) over %d connection(s), %s\n", r.Mode, r.URL, r.Sessions, r.Conns, pace)
	fmt.Fprintf(w, "turns        %d completed in %.1f s = %.1f turns/s; %d failed runs, %d errors\n",
		r.Turns, r.Seconds, r.TurnsPerSec, r.FailedRuns, r.Errors)
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(w, "  error      %s\n", e)
	}
	fmt.Fprintf(w, "latency      p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  max %.1f ms  (chat.send → run.finished)\n",
		r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs)
	if r.ServerCPUMsPerTurn != nil {
		fmt.Fprintf(w, "server CPU   %.2f ms per completed turn\n", *r.ServerCPUMsPerTurn)
	}
	if r.ClientCPUMsPerTurn != nil {
		fmt.Fprintf(w, "load CPU     %.2f ms per completed turn (this process)\n", *r.ClientCPUMsPerTurn)
	}
	fmt.Fprintf(w, "frames       %d streamed, %d dropped\n", r.StreamFrames, r.DroppedFrames)
	if r.Turns > 0 && r.Frames > 0 {
		fmt.Fprintf(w, "per turn     %.1f frames over all connections, %.1f on one connection (%d user(s), %.1f connection(s) each)\n",
			r.FramesPerTurn, r.FramesPerTurnPerConn, r.Users, r.ConnsPerUser)
		types := slices.Sorted(maps.Keys(r.FrameTypes))
		parts := make([]string, 0, len(types))
		for _, t := range types {
			parts = append(parts, fmt.Sprintf("%s %.2f", t, float64(r.FrameTypes[t])/float64(r.Turns)/r.ConnsPerUser))
		}
		fmt.Fprintf(w, "             one connection, per turn: %s\n", strings.Join(parts, ", "))
	}
	if d := r.Depth; d != nil {
		fmt.Fprintf(w, "depth        first %d turns: median %.1f ms; %d turns past message %d: median %.1f ms",
			d.FirstTurns, d.FirstMedianMs, d.PastTurns, d.After, d.PastMedianMs)
		if d.Ratio > 0 {
			fmt.Fprintf(w, " (×%.2f)", d.Ratio)
		}
		fmt.Fprintf(w, "; the session holds %d messages\n", d.Messages)
		if d.PastTurns == 0 {
			fmt.Fprintf(w, "             no turn went past message %d: raise --turns\n", d.After)
		}
	}
	for _, e := range r.ErrorSamples {
		fmt.Fprintf(w, "error        %s\n", e)
	}
}

// cpuSample is the CPU time used so far by the server (-1: unknown) and by this process.
type cpuSample struct{ server, self time.Duration }

func sampleCPU(serverPID int) cpuSample {
	s := cpuSample{server: -1, self: procCPU("self")}
	if serverPID > 0 {
		s.server = procCPU(strconv.Itoa(serverPID))
	}
	return s
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux architecture
// Go supports.
const clockTicks = 100

// procCPU reads utime+stime of /proc/<pid>/stat; -1 when it cannot (not Linux, no such process).
func procCPU(pid string) time.Duration {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) is in parentheses and may hold spaces; fields count from after it.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * time.Second / clockTicks
}

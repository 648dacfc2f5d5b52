package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/channels"
)

// handleReadyz answers whether the server can do its work: the store answers and every configured
// channel is connected. The body lists each channel's state (with the reason while it retries), so
// an operator sees at once which platform is down and why.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Cache-Control", "no-store")
	body := map[string]any{"status": "ready", "store": "ok"}
	ready := true
	if err := s.st.Ping(ctx); err != nil {
		s.log.WarnContext(r.Context(), "readiness: store unreachable", "err", err)
		body["store"] = "unreachable"
		ready = false
	}
	// Several replicas: this one is ready once it hears the others' run events.
	if rb, ok := s.bus.(interface{ Ready() bool }); ok {
		body["bus"] = "listening"
		if !rb.Ready() {
			body["bus"] = "connecting"
			ready = false
		}
	}
	states := []channels.State{}
	if s.cfg.ChannelStates != nil {
		states = s.cfg.ChannelStates()
	}
	for _, st := range states {
		if st.Phase != channels.PhaseConnected {
			ready = false
		}
	}
	body["channels"] = states
	status := http.StatusOK
	if !ready {
		body["status"] = "not_ready"
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
}

// channelStateCollector exposes citegate_channel_state{channel,state}: 1 for each channel's current
// state, 0 for the others, read at scrape time.
type channelStateCollector struct {
	states func() []channels.State
	desc   *prometheus.Desc
}

func newChannelStateCollector(states func() []channels.State) *channelStateCollector {
	return &channelStateCollector{states: states, desc: prometheus.NewDesc("citegate_channel_state",
		"Chat channel state: 1 for the state the channel is in (starting, connected, retrying, failed).",
		[]string{"channel", "state"}, nil)}
}

func (c *channelStateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *channelStateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.states() {
		for _, p := range []string{channels.PhaseStarting, channels.PhaseConnected, channels.PhaseRetrying, channels.PhaseFailed} {
			v := 0.0
			if st.Phase == p {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, st.Channel, p)
		}
	}
}

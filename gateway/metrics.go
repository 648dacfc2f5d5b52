package gateway

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus collectors, registered on Config.Registry.
type metrics struct {
	runs            *prometheus.CounterVec // phase, channel
	markers         *prometheus.CounterVec // result: seen, kept, dropped
	citationsPerAns prometheus.Histogram
	deltaLatency    prometheus.Histogram
	wsClients       prometheus.Gauge
	wsDropped       prometheus.Counter
	storeErrors     *prometheus.CounterVec // op
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "citegate_runs_total",
			Help: "Agent runs that reached a terminal phase, by phase and channel.",
		}, []string{"phase", "channel"}),
		markers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "citegate_citation_markers_total",
			Help: "Citation markers in final answers: seen, kept (verified) and dropped.",
		}, []string{"result"}),
		citationsPerAns: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "citegate_citations_per_answer",
			Help:    "Verified citations per completed answer.",
			Buckets: []float64{0, 1, 2, 3, 4, 5, 8, 12, 20},
		}),
		deltaLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "citegate_answer_delta_latency_seconds",
			Help:    "Time from an answer.delta event to its frame being written to a websocket connection.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}),
		wsClients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "citegate_websocket_clients",
			Help: "Connected desktop websocket clients.",
		}),
		wsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citegate_websocket_dropped_total",
			Help: "Websocket clients disconnected because they could not keep up.",
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "citegate_store_errors_total",
			Help: "Store operations issued by the gateway that failed (not counting not-found).",
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.runs, m.markers, m.citationsPerAns, m.deltaLatency, m.wsClients, m.wsDropped, m.storeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: register metrics: %w", err)
		}
	}
	// Make the label sets visible at zero so dashboards and tests see them before the first run.
	for _, r := range []string{"seen", "kept", "dropped"} {
		m.markers.WithLabelValues(r)
	}
	m.storeErrors.WithLabelValues("ping")
	return m, nil
}

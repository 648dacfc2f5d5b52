package gateway

import (
	"errors"
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
	linksHidden     *prometheus.CounterVec // model, channel
	feedback        *prometheus.CounterVec // vote: up, down (feedback.go)
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
			Help:    "Time from an answer.delta event to its frame being written to a websocket connection (joined text counts from its oldest event).",
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
	var err error
	if m.linksHidden, err = linksHiddenCounter(reg); err != nil {
		return nil, err
	}
	if m.feedback, err = feedbackCounter(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// linksHiddenCounter returns citegate_links_hidden_total registered on reg, or the collector
// already registered there under that name (the gateway and the dispatcher share one registry in
// serve, and both may count). A nil reg gives an unregistered counter.
func linksHiddenCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "citegate_links_hidden_total",
		Help: "Unverified links hidden from answers (link rule, DESIGN §4), by model and channel.",
	}, []string{"model", "channel"})
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("gateway: register links hidden counter: %w", err)
	}
	return c, nil
}

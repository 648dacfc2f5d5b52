package gateway

import (
	"sync"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

// runState remembers what a run's later events need: the final content (the citations frame
// re-renders it) and the number of verified citations (a metric observed at run.finished).
type runState struct {
	content   string
	messageID uint64
	cits      int
	model     string
}

// runTracker keeps per-run state for the hub and records the run metrics. It sees every run of
// the agent (desktop and channels alike) and never touches the store.
type runTracker struct {
	m    *metrics
	mu   sync.Mutex
	runs map[string]*runState
}

func newRunTracker(m *metrics) *runTracker {
	return &runTracker{m: m, runs: make(map[string]*runState)}
}

// finalContent returns the final answer of the run whose citations event this is, when the
// tracker saw its answer.final.
func (t *runTracker) finalContent(ev agent.Event) (string, bool) {
	if ev.Content != "" {
		return ev.Content, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.runs[ev.RunID]; st != nil && st.messageID == ev.MessageID {
		return st.content, true
	}
	return "", false
}

// track updates the run's state and, at run.finished, the metrics.
func (t *runTracker) track(ev agent.Event) {
	if ev.Type == agent.EventAnswerDelta {
		return // the most frequent event, and none of the tracker's business
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Type {
	case agent.EventRunStarted:
		t.runs[ev.RunID] = &runState{model: ev.Model}
	case agent.EventAnswerFinal:
		st := t.runs[ev.RunID]
		if st == nil {
			st = &runState{}
			t.runs[ev.RunID] = st
		}
		st.content, st.messageID = ev.Content, ev.MessageID
	case agent.EventCitations:
		if st := t.runs[ev.RunID]; st != nil {
			st.cits = len(ev.Citations)
		}
	case agent.EventRunFinished:
		st := t.runs[ev.RunID]
		delete(t.runs, ev.RunID)
		ch := ev.Channel
		if ch == "" {
			ch = "unknown"
		}
		t.m.runs.WithLabelValues(string(ev.Phase), ch).Inc()
		t.m.markers.WithLabelValues("seen").Add(float64(ev.MarkersSeen))
		t.m.markers.WithLabelValues("kept").Add(float64(ev.MarkersKept))
		t.m.markers.WithLabelValues("dropped").Add(float64(ev.MarkersDropped))
		// Chat channels count the links their reply pump hid (it applies the rule to what it sends);
		// the desktop shows the agent's own stream and the record's decision, counted here.
		if ch == "desktop" && ev.LinksHidden > 0 && t.m.linksHidden != nil {
			model := "unknown"
			if st != nil && st.model != "" {
				model = st.model
			}
			t.m.linksHidden.WithLabelValues(model, ch).Add(float64(ev.LinksHidden))
		}
		if ev.Phase == store.PhaseCompleted {
			n := 0
			if st != nil {
				n = st.cits
			}
			t.m.citationsPerAns.Observe(float64(n))
		}
	}
}

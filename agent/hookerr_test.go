package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// markerFailStore is the real store whose marker counters cannot be written.
type markerFailStore struct{ *store.Store }

func (markerFailStore) SetRunMarkers(context.Context, string, int, int, int) error {
	return errors.New("counters unavailable")
}

// TestCitationsEventFollowsTheRecord: when the citations were stored but recording the marker
// counts failed, the live view (citations event, Outcome) still shows what the record holds.
func TestCitationsEventFollowsTheRecord(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hitInvoice)
	llm := newFakeLLM(t,
		toolStream("", call{id: "call_a", name: "web_search", args: []string{`{"query":"发票"}`}}),
		textStream("应先红冲再重开。[^1^]"),
	)
	rec := &recorder{}
	a := newAgent(t, Config{Store: markerFailStore{st}, Model: llm.model(t), Tools: []Tool{search}})
	unsub := a.Subscribe(rec.sink)
	defer unsub()

	out := run(t, a, sid, "电子发票抬头写错了怎么办？", nil)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	msg, err := st.GetMessage(context.Background(), out.FinalMessageID)
	require.NoError(t, err)
	stored := citations.FromMetadata(msg.Metadata)
	require.Len(t, stored, 1, "the citations were recorded")

	assert.Equal(t, stored, out.Citations)
	var live []citations.Citation
	for _, ev := range rec.all() {
		if ev.Type == EventCitations {
			live = ev.Citations
		}
	}
	assert.Equal(t, stored, live, "the citations event shows what was recorded")
}

package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// splitRoundModel ends its tool-calling round with the start of a marker and finishes it in the next
// round, so only a stream-wide Stripper keeps the joined deltas marker-free.
type splitRoundModel struct{ round int }

func (m *splitRoundModel) Name() string { return "split" }

func (m *splitRoundModel) Generate(ctx context.Context, req ModelRequest, onDelta func(string)) (ModelResponse, error) {
	m.round++
	if m.round == 1 {
		onDelta("让我查一下[^1")
		return ModelResponse{Text: "让我查一下[^1", ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"q"}`}}}, nil
	}
	onDelta("^] 结论是红冲。[^1^]")
	return ModelResponse{Text: "^] 结论是红冲。[^1^]"}, nil
}

func TestDeltasStayMarkerFreeAcrossRounds(t *testing.T) {
	st := openStore(t)
	search, _ := searchTool(hit{"发票", "https://kb.example/invoice", "先红冲再重开"})
	a := newAgent(t, Config{Store: st, Model: &splitRoundModel{}, Tools: []Tool{search}})
	var rec recorder
	out := run(t, a, newSession(t, st), "发票抬头错了", rec.sink)
	require.Equal(t, store.PhaseCompleted, out.Phase)

	var joined strings.Builder
	for _, ev := range rec.all() {
		if ev.Type == EventAnswerDelta {
			joined.WriteString(ev.Text)
		}
	}
	assert.Empty(t, citations.Markers(joined.String()), "the stream the desktop shows holds a marker: %q", joined.String())
	assert.Equal(t, citations.Strip("让我查一下[^1"+"^] 结论是红冲。[^1^]"), joined.String())
	require.Len(t, out.Citations, 1, "the final round's own marker is verified as usual")
}

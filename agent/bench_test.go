package agent

import (
	"context"
	"testing"
)

// BenchmarkRunExtractive measures one whole offline turn: user message, search round with a fake
// web_search, extractive answer streamed in small deltas, final message, phase and citations in one conclusion,
// all on a real bbolt store.
func BenchmarkRunExtractive(b *testing.B) {
	st := openStoreTB(b)
	search, _ := searchTool(hitInvoice, hitTypes, hitLeave)
	a, err := New(Config{Store: st, Model: NewExtractive(), Tools: []Tool{search}, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	sid := newSessionTB(b, st)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h, err := a.Submit(context.Background(), Turn{SessionID: sid, Text: "电子发票抬头写错了怎么办？"})
		if err != nil {
			b.Fatal(err)
		}
		<-h.Done()
		if o := h.Outcome(); len(o.Citations) == 0 {
			b.Fatalf("no citations: %+v", o)
		}
	}
}

package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

func ev(typ agent.EventType, run string) agent.Event {
	return agent.Event{Type: typ, SessionID: "s-" + run, RunID: run, Channel: "desktop", At: time.Unix(100, 5)}
}

func delta(run, text string) busItem {
	e := ev(agent.EventAnswerDelta, run)
	e.Text = text
	return busItem{ev: &e}
}

// roundTrip packs items as replica "a" and unpacks them as replica "b".
func roundTrip(t *testing.T, items []busItem) ([]agent.Event, []string, [][]byte) {
	t.Helper()
	p := packer{replica: "a"}
	packets, err := p.pack(items)
	require.NoError(t, err)
	u := newUnpacker("b", time.Now)
	var evs []agent.Event
	var cancels []string
	for _, pk := range packets {
		require.LessOrEqual(t, len(pk), maxPacketBytes, "a packet fits a NOTIFY payload")
		got, err := u.unpack(pk)
		require.NoError(t, err)
		evs, cancels = append(evs, got.events...), append(cancels, got.cancels...)
	}
	assert.Zero(t, u.gaps)
	return evs, cancels, packets
}

func TestOutboxCoalescesDeltasPerRunInOrder(t *testing.T) {
	o := newOutbox()
	started := ev(agent.EventRunStarted, "r1")
	o.push(busItem{ev: &started})
	o.push(delta("r1", "a"))
	o.push(delta("r2", "x"))
	o.push(delta("r1", "b"))
	tool := ev(agent.EventToolStarted, "r1")
	o.push(busItem{ev: &tool})
	o.push(delta("r1", "c")) // after the tool event: must not merge into "ab"
	o.push(delta("r2", "y"))
	o.push(busItem{cancel: "s-r3"})
	items := o.take()
	var got []string
	for _, it := range items {
		if it.ev == nil {
			got = append(got, "cancel:"+it.cancel)
			continue
		}
		got = append(got, string(it.ev.Type)+":"+it.ev.RunID+":"+it.ev.Text)
	}
	assert.Equal(t, []string{"run.started:r1:", "answer.delta:r1:ab", "answer.delta:r2:xy", "tool.started:r1:", "answer.delta:r1:c", "cancel:s-r3"}, got)
	assert.Empty(t, o.take())
}

func TestOutboxBoundsItsQueue(t *testing.T) {
	o := newOutbox()
	for i := range maxOutboxItems {
		e := ev(agent.EventToolStarted, "r"+strings.Repeat("x", i%7))
		require.True(t, o.push(busItem{ev: &e}))
	}
	e := ev(agent.EventRunFinished, "r")
	assert.False(t, o.push(busItem{ev: &e}), "a full outbox drops rather than blocks")
	assert.Equal(t, uint64(1), o.dropped)
	// A delta still merges into a queued one of its run when the queue is full.
	o2 := newOutbox()
	o2.push(delta("r1", "a"))
	for range maxOutboxItems - 1 {
		e := ev(agent.EventToolFinished, "other")
		o2.push(busItem{ev: &e})
	}
	assert.True(t, o2.push(delta("r1", "b")))
}

func TestPackUnpackRoundTrip(t *testing.T) {
	long := strings.Repeat("长文本<&>", 2000)               // 24 KB of delta: split into pieces, JSON-escaped characters included
	args := `{"q":"` + strings.Repeat("x", 30000) + `"}` // too large for one packet: fragments
	started := ev(agent.EventRunStarted, "r1")
	started.UserMessageID, started.Model = 7, "extractive"
	tool := ev(agent.EventToolStarted, "r1")
	tool.CallID, tool.Tool, tool.Arguments = "c1", "web_search", args
	final := ev(agent.EventAnswerFinal, "r1")
	final.MessageID, final.Content = 9, strings.Repeat("answer ", 5000)
	cits := ev(agent.EventCitations, "r1")
	cits.MessageID, cits.Citations = 9, []citations.Citation{{N: 1, URL: "https://example.com"}}
	fin := ev(agent.EventRunFinished, "r1")
	fin.Phase = store.PhaseCompleted
	items := []busItem{{ev: &started}, {ev: &tool}, delta("r1", long), {ev: &final}, {ev: &cits}, {cancel: "s-r9"}, {ev: &fin}}

	evs, cancels, packets := roundTrip(t, items)
	assert.Equal(t, []string{"s-r9"}, cancels)
	var text strings.Builder
	var types []agent.EventType
	for _, e := range evs {
		assert.Equal(t, "desktop", e.Channel)
		assert.Equal(t, time.Unix(100, 5), e.At, "the source's time travels")
		if e.Type == agent.EventAnswerDelta {
			text.WriteString(e.Text)
			continue
		}
		types = append(types, e.Type)
	}
	assert.Equal(t, long, text.String(), "the split delta reassembles byte for byte")
	assert.Equal(t, []agent.EventType{agent.EventRunStarted, agent.EventToolStarted, agent.EventAnswerFinal, agent.EventCitations, agent.EventRunFinished}, types)
	assert.Equal(t, uint64(7), evs[0].UserMessageID)
	assert.Equal(t, args, evs[1].Arguments, "a fragmented event reassembles")
	for _, e := range evs {
		if e.Type == agent.EventAnswerFinal || e.Type == agent.EventCitations {
			assert.Empty(t, e.Content, "content travels by reference (message id)")
			assert.Nil(t, e.Citations, "citations travel by reference")
			assert.Equal(t, uint64(9), e.MessageID)
		}
	}
	assert.Greater(t, len(packets), 8)
}

func TestUnpackSkipsOwnDuplicatesAndCountsGaps(t *testing.T) {
	p := packer{replica: "a"}
	var packets [][]byte
	for i := range 4 {
		pk, err := p.pack([]busItem{delta("r1", string(rune('a'+i)))})
		require.NoError(t, err)
		packets = append(packets, pk...)
	}
	own := newUnpacker("a", time.Now)
	own0, err := own.unpack(packets[0])
	require.NoError(t, err)
	assert.Empty(t, own0.events, "a replica ignores its own packets")

	u := newUnpacker("b", time.Now)
	got := ""
	for _, i := range []int{0, 0, 2, 1, 3} { // a duplicate, a gap, a late packet
		up, err := u.unpack(packets[i])
		require.NoError(t, err)
		for _, e := range up.events {
			got += e.Text
		}
	}
	assert.Equal(t, "acd", got, "duplicates and late packets are dropped, never delivered out of order")
	assert.Equal(t, uint64(1), u.gaps)

	for _, bad := range []string{``, `[]`, `{"r":"","q":1}`, `{"r":"x","q":0}`, `{"r":"x","q":1,"f":{"id":1,"i":3,"n":2,"d":""}}`, `{"r":"x","q":1,"f":{"id":1,"i":0,"n":100000,"d":""}}`} {
		_, err := u.unpack([]byte(bad))
		assert.ErrorIs(t, err, errBadPacket, bad)
	}
}

// User frames keep their place among events: a packet's user frames are delivered before its
// events, so the packer starts a new packet for a user frame that follows an event.
func TestPackKeepsUserFramesInOrder(t *testing.T) {
	frame := func(typ, sid string) busItem {
		return busItem{user: &userFrame{User: "u1", Frame: json.RawMessage(`{"type":"` + typ + `","sessionId":"` + sid + `"}`)}}
	}
	started := ev(agent.EventRunStarted, "r1")
	items := []busItem{frame("session.created", "s-r1"), {ev: &started}, delta("r1", "a"), frame("session.updated", "s-r1"), delta("r1", "b"), frame("session.deleted", "s-r1")}
	p := packer{replica: "a"}
	packets, err := p.pack(items)
	require.NoError(t, err)
	u := newUnpacker("b", time.Now)
	var order []string
	for _, pk := range packets {
		up, err := u.unpack(pk)
		require.NoError(t, err)
		for _, uf := range up.users {
			assert.Equal(t, "u1", uf.User)
			var f struct{ Type string }
			require.NoError(t, json.Unmarshal(uf.Frame, &f))
			order = append(order, f.Type)
		}
		for _, e := range up.events {
			order = append(order, string(e.Type)+":"+e.Text)
		}
	}
	assert.Equal(t, []string{"session.created", "run.started:", "answer.delta:a", "session.updated", "answer.delta:b", "session.deleted"}, order)
	assert.Len(t, packets, 3, "a packet per run of frames that follow events")

	// A user frame that cannot be a JSON object is skipped and counted; the packet's others arrive.
	bad := []byte(`{"r":"c","q":1,"u":[{"u":"u1","f":"x"},{"u":"","f":{"type":"session.deleted"}},{"u":"u2","f":{"type":"session.deleted","sessionId":"s"}}]}`)
	up, err := u.unpack(bad)
	require.NoError(t, err)
	require.Len(t, up.users, 1)
	assert.Equal(t, "u2", up.users[0].User)
	assert.Equal(t, uint64(2), u.bad)
}

func TestUnpackDropsAFragmentSeriesWithAHole(t *testing.T) {
	p := packer{replica: "a"}
	tool := ev(agent.EventToolStarted, "r1")
	tool.Arguments = strings.Repeat("y", 3*fragmentBytes)
	packets, err := p.pack([]busItem{{ev: &tool}, delta("r1", "after")})
	require.NoError(t, err)
	require.Len(t, packets, 5, "four fragments, then the delta")
	u := newUnpacker("b", time.Now)
	var got []agent.Event
	for i, pk := range packets {
		if i == 1 {
			continue // lost
		}
		up, err := u.unpack(pk)
		require.NoError(t, err)
		got = append(got, up.events...)
	}
	require.Len(t, got, 1, "the broken series is dropped, the next event still arrives")
	assert.Equal(t, "after", got[0].Text)
	assert.Equal(t, uint64(1), u.gaps)
}

func FuzzBusUnpack(f *testing.F) {
	p := packer{replica: "a"}
	tool := ev(agent.EventToolStarted, "r1")
	tool.Arguments = strings.Repeat("z", fragmentBytes+10)
	packets, err := p.pack([]busItem{delta("r1", "hello"), {ev: &tool}, {cancel: "s1"},
		{user: &userFrame{User: "u1", Frame: json.RawMessage(`{"type":"session.deleted","sessionId":"s1"}`)}}})
	if err != nil {
		f.Fatal(err)
	}
	for _, pk := range packets {
		f.Add(pk)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u := newUnpacker("b", time.Now)
		for range 2 {
			up, err := u.unpack(data)
			if err != nil {
				continue
			}
			evs := up.events
			for _, uf := range up.users {
				if uf.User == "" || !json.Valid(uf.Frame) || uf.Frame[0] != '{' {
					t.Fatalf("unpack let through user frame %+v", uf)
				}
			}
			for _, e := range evs {
				if e.SessionID == "" || e.RunID == "" || e.Channel != "desktop" {
					t.Fatalf("unpack let through %+v", e)
				}
			}
			for _, c := range up.cancels {
				if c == "" {
					t.Fatal("empty cancel")
				}
			}
			raw, _ := json.Marshal(evs)
			_ = raw
		}
	})
}

// Sessions whose run ended travel as their own list, apart from cancels and user disconnects,
// many to a packet and on to the next packet when one is full.
func TestPackUnpackRunEnded(t *testing.T) {
	var items []busItem
	var want []string
	for i := range 400 {
		sid := fmt.Sprintf("session-%03d-%s", i, strings.Repeat("x", 20))
		want = append(want, sid)
		items = append(items, busItem{ended: sid})
	}
	items = append(items, busItem{cancel: "s-c"}, busItem{closeUser: "u-x"})
	pk := packer{replica: "a"}
	packets, err := pk.pack(items)
	require.NoError(t, err)
	require.Greater(t, len(packets), 1, "400 ids do not fit one packet")
	un := newUnpacker("b", time.Now)
	var ended, cancels, closes []string
	for _, p := range packets {
		assert.LessOrEqual(t, len(p), maxPacketBytes)
		got, err := un.unpack(p)
		require.NoError(t, err)
		ended, cancels, closes = append(ended, got.ended...), append(cancels, got.cancels...), append(closes, got.closes...)
	}
	assert.Equal(t, want, ended)
	assert.Equal(t, []string{"s-c"}, cancels)
	assert.Equal(t, []string{"u-x"}, closes)
}

package feishu

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func dataFrame(id string, sum, seq int, payload string) (*larkws.Frame, larkws.Headers) {
	hs := larkws.Headers{
		{Key: larkws.HeaderType, Value: string(larkws.MessageTypeEvent)},
		{Key: larkws.HeaderMessageID, Value: id},
		{Key: larkws.HeaderSum, Value: strconv.Itoa(sum)},
		{Key: larkws.HeaderSeq, Value: strconv.Itoa(seq)},
	}
	return &larkws.Frame{Method: int32(larkws.FrameTypeData), Headers: hs, Payload: []byte(payload)}, hs
}

func TestReassembly(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	add := func(r *reassembly, id string, sum, seq int, p string, at time.Time) (string, bool) {
		f, hs := dataFrame(id, sum, seq, p)
		out, ok := r.add(f, hs, at)
		return string(out), ok
	}

	t.Run("single frame passes through", func(t *testing.T) {
		got, ok := add(newReassembly(nil), "m", 1, 0, "whole", now)
		assert.True(t, ok)
		assert.Equal(t, "whole", got)
	})
	t.Run("out of order and interleaved", func(t *testing.T) {
		r := newReassembly(nil)
		steps := []struct {
			id       string
			seq      int
			p        string
			complete string
		}{
			{"a", 2, "A3", ""}, {"b", 0, "B1", ""}, {"a", 0, "A1", ""}, {"b", 1, "B2", "B1B2"}, {"a", 1, "A2", "A1A2A3"},
		}
		for _, s := range steps {
			sum := 3
			if s.id == "b" {
				sum = 2
			}
			got, ok := add(r, s.id, sum, s.seq, s.p, now)
			assert.Equal(t, s.complete != "", ok, "%s/%d", s.id, s.seq)
			assert.Equal(t, s.complete, got)
		}
		assert.Empty(t, r.pending, "complete payloads are forgotten")
	})
	t.Run("a repeated part replaces, is not counted twice", func(t *testing.T) {
		r := newReassembly(nil)
		_, ok := add(r, "m", 2, 0, "old", now)
		require.False(t, ok)
		_, ok = add(r, "m", 2, 0, "new", now)
		require.False(t, ok, "two copies of part 0 do not make two parts")
		got, ok := add(r, "m", 2, 1, "!", now)
		require.True(t, ok)
		assert.Equal(t, "new!", got)
	})
	t.Run("frames the caller's buffer is reused for", func(t *testing.T) {
		r := newReassembly(nil)
		f, hs := dataFrame("m", 2, 0, "ab")
		_, _ = r.add(f, hs, now)
		f.Payload[0] = 'X' // the read buffer of the next message
		got, ok := add(r, "m", 2, 1, "cd", now)
		require.True(t, ok)
		assert.Equal(t, "abcd", got)
	})
	t.Run("bounds", func(t *testing.T) {
		r := newReassembly(nil)
		for _, c := range []struct{ sum, seq int }{{maxFrameParts + 1, 0}, {3, 3}, {3, -1}} {
			_, ok := add(r, "m", c.sum, c.seq, "x", now)
			assert.False(t, ok)
		}
		assert.Empty(t, r.pending, "out-of-bounds frames hold nothing")
		big := make([]byte, maxPayloadBytes/2+1)
		for seq := range 2 {
			f, hs := dataFrame("big", 3, seq, "")
			f.Payload = big
			_, ok := r.add(f, hs, now)
			assert.False(t, ok)
		}
		assert.Empty(t, r.pending, "a payload over maxPayloadBytes is dropped")
		_, ok := add(r, "big", 3, 2, "x", now)
		assert.False(t, ok, "its last part starts a new, incomplete payload")
	})
	t.Run("an incomplete payload expires", func(t *testing.T) {
		r := newReassembly(nil)
		_, _ = add(r, "m", 2, 0, "a", now)
		_, ok := add(r, "other", 2, 0, "x", now.Add(partsTTL+time.Second))
		require.False(t, ok)
		assert.NotContains(t, r.pending, "m")
		_, ok = add(r, "m", 2, 1, "b", now.Add(partsTTL+time.Second))
		assert.False(t, ok, "the late part cannot complete a forgotten payload")
	})
	t.Run("every drop is reported with its reason", func(t *testing.T) {
		var why []string
		r := newReassembly(func(id, w string) { why = append(why, id+": "+w) })
		_, _ = add(r, "bad", maxFrameParts+1, 0, "x", now)
		big := make([]byte, maxPayloadBytes+1)
		f, hs := dataFrame("big", 2, 0, "")
		f.Payload = big
		_, _ = r.add(f, hs, now)
		_, _ = add(r, "slow", 2, 0, "a", now)
		_, _ = add(r, "other", 2, 0, "b", now.Add(partsTTL+time.Second))
		require.Len(t, why, 3)
		assert.Contains(t, why[0], "bad: part 0 of 65 is outside the bounds")
		assert.Contains(t, why[1], "big: payload over")
		assert.Contains(t, why[2], "slow: incomplete after 5s: 1 of 2 parts")
	})
	t.Run("a different sum starts over", func(t *testing.T) {
		r := newReassembly(nil)
		_, _ = add(r, "m", 3, 0, "a", now)
		_, ok := add(r, "m", 2, 1, "b", now)
		require.False(t, ok)
		got, ok := add(r, "m", 2, 0, "a", now)
		require.True(t, ok)
		assert.Equal(t, "ab", got)
	})
}

func TestReconnectDelay(t *testing.T) {
	c := &Channel{cfg: Config{ReconnectBackoff: time.Second, MaxReconnectBackoff: 60 * time.Second}}
	ec := defaultEndpointConfig()
	for range 200 {
		assert.LessOrEqual(t, c.reconnectDelay(ec, 0), time.Second, "after a working connection: within the backoff")
		d := c.reconnectDelay(ec, 3)
		assert.GreaterOrEqual(t, d, 2*time.Second)
		assert.LessOrEqual(t, d, 4*time.Second)
		d = c.reconnectDelay(ec, 30)
		assert.GreaterOrEqual(t, d, 30*time.Second)
		assert.LessOrEqual(t, d, 60*time.Second, "capped")
	}
	ec.nonce = 100 * time.Millisecond
	for range 200 {
		assert.LessOrEqual(t, c.reconnectDelay(ec, 0), 100*time.Millisecond, "a shorter server nonce wins")
	}
}

func TestEndpointConfigIgnoresZeroFields(t *testing.T) {
	ec := defaultEndpointConfig()
	ec.apply(&larkws.ClientConfig{})
	assert.Equal(t, defaultEndpointConfig(), ec, "a zero PingInterval must not make the client ping in a loop")
	ec.apply(&larkws.ClientConfig{PingInterval: 5, ReconnectNonce: 7, ReconnectInterval: 9})
	assert.Equal(t, 5*time.Second, ec.ping)
	assert.Equal(t, 7*time.Second, ec.nonce)
}

func TestEndpointConfigCapsHugeIntervals(t *testing.T) {
	ec := defaultEndpointConfig()
	ec.apply(&larkws.ClientConfig{PingInterval: 1 << 40, ReconnectNonce: 1 << 40})
	assert.Equal(t, time.Hour, ec.ping, "an overflowing interval would turn negative and ping in a loop")
	assert.Equal(t, time.Hour, ec.nonce)
}

// recordWriter keeps the frames a frameHandler writes.
type recordWriter struct{ frames []larkws.Frame }

func (w *recordWriter) write(f *larkws.Frame) error {
	w.frames = append(w.frames, *f)
	return nil
}

func marshalFrame(t testing.TB, f *larkws.Frame) []byte {
	b, err := f.Marshal()
	require.NoError(t, err)
	return b
}

// FuzzFrameHandler: whatever bytes arrive as a websocket message, handling them does not panic
// (the read loop's recover is the last resort, not the plan), and every frame written back is the
// ack of a data frame: code 200 or 500 in a JSON response. Each input is handled twice on one
// reassembly that already holds the first part of a split payload, so repeated and completing
// parts are exercised too.
func FuzzFrameHandler(f *testing.F) {
	ev := []byte(`{"schema":"2.0","header":{"event_id":"e1","event_type":"im.message.receive_v1","token":"","app_id":"cli"},"event":{"message":{"message_id":"om_1","chat_id":"oc_1","chat_type":"p2p","message_type":"text","content":"{\"text\":\"hi\"}"},"sender":{"sender_id":{"open_id":"ou_1"}}}}`)
	one, _ := dataFrame("f1", 1, 0, string(ev))
	second, _ := dataFrame("split", 2, 1, string(ev[len(ev)/2:]))
	pong := larkws.Frame{Method: int32(larkws.FrameTypeControl), Headers: larkws.Headers{{Key: larkws.HeaderType, Value: string(larkws.MessageTypePong)}}, Payload: []byte(`{"PingInterval":-5,"ReconnectNonce":99999999999}`)}
	for _, seed := range []*larkws.Frame{one, second, &pong} {
		f.Add(marshalFrame(f, seed))
	}
	f.Add([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte("not a frame"))
	c, err := New(Config{AppID: "cli", AppSecret: "secret"})
	require.NoError(f, err)
	d := c.newEventDispatcher("", "")
	first, _ := dataFrame("split", 2, 0, string(ev[:len(ev)/2]))
	f.Fuzz(func(t *testing.T, data []byte) {
		w := &recordWriter{}
		h := &frameHandler{c: c, ctx: context.Background(), w: w, d: d, parts: newReassembly(nil), onConfig: func(cc *larkws.ClientConfig) {
			ec := defaultEndpointConfig()
			ec.apply(cc)
			if ec.ping <= 0 || ec.nonce <= 0 {
				t.Fatalf("config %+v gives ping %v nonce %v", cc, ec.ping, ec.nonce)
			}
		}}
		fr, hs := first, larkws.Headers(first.Headers)
		_, _ = h.parts.add(fr, hs, time.Now())
		for range 2 {
			require.NoError(t, h.handle(data))
		}
		for _, out := range w.frames {
			assert.Equal(t, int32(larkws.FrameTypeData), out.Method)
			var resp larkws.Response
			require.NoError(t, json.Unmarshal(out.Payload, &resp))
			assert.Contains(t, []int{200, 500}, resp.StatusCode)
		}
	})
}

// TestFrameHandlerAcks: a complete event is acknowledged on the frame that completed it, with
// biz_rt, and 500 while the channel is not running (Feishu pushes it again to a live connection);
// the first part of a split payload gets no ack; a pong reconfigures.
func TestFrameHandlerAcks(t *testing.T) {
	c, err := New(Config{AppID: "cli", AppSecret: "secret"})
	require.NoError(t, err)
	w := &recordWriter{}
	var got []*larkws.ClientConfig
	h := &frameHandler{c: c, ctx: context.Background(), w: w, d: c.newEventDispatcher("", ""), parts: newReassembly(nil),
		onConfig: func(cc *larkws.ClientConfig) { got = append(got, cc) }}
	ev := `{"schema":"2.0","header":{"event_id":"e1","event_type":"im.message.receive_v1"},"event":{}}`
	a, _ := dataFrame("m", 2, 0, ev[:10])
	b, _ := dataFrame("m", 2, 1, ev[10:])
	require.NoError(t, h.handle(marshalFrame(t, a)))
	assert.Empty(t, w.frames, "no ack for a part")
	require.NoError(t, h.handle(marshalFrame(t, b)))
	require.Len(t, w.frames, 1)
	ack := w.frames[0]
	hs := larkws.Headers(ack.Headers)
	assert.Equal(t, "m", hs.GetString(larkws.HeaderMessageID))
	assert.Equal(t, "1", hs.GetString(larkws.HeaderSeq), "acked on the completing frame")
	assert.NotEmpty(t, hs.GetString(larkws.HeaderBizRt))
	var resp larkws.Response
	require.NoError(t, json.Unmarshal(ack.Payload, &resp))
	assert.Equal(t, 500, resp.StatusCode, "not running: refused so Feishu re-delivers")

	pong := larkws.Frame{Method: int32(larkws.FrameTypeControl), Headers: larkws.Headers{{Key: larkws.HeaderType, Value: string(larkws.MessageTypePong)}}, Payload: []byte(`{"PingInterval":7}`)}
	require.NoError(t, h.handle(marshalFrame(t, &pong)))
	require.Len(t, got, 1)
	assert.Equal(t, 7, got[0].PingInterval)
	require.NoError(t, h.safeHandle([]byte("garbage")))
	assert.Len(t, w.frames, 1, "garbage is dropped without an answer")
}

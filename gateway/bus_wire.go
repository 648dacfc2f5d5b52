package gateway

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/citegate/citegate/agent"
)

// The bus wire format: one packet per notification, JSON, at most maxPacketBytes (PostgreSQL caps
// a NOTIFY payload at 8000 bytes). A packet carries a batch of events and cancel requests:
//
//	{"r":"<replica>","q":<seq>,"u":[{"u":"<user id>","f":<frame>},…],"e":[<event>,…],"c":["<session id>",…],"x":["<user id>",…],"d":["<session id>",…]}
//
// "d" names sessions a run of which ended on the sender (completed, failed, cancelled or reaped):
// a turn of the session waiting on the receiver looks again (bus_order.go).
//
// "x" names users whose websocket connections every replica closes (a token rotated or a user
// revoked, by a replica's admin socket or by `citegate user` straight on the database).
//
// "u" are websocket frames for every client of one user wherever it is connected (session.created,
// session.updated, session.deleted: what a user's other tabs learn outside any run, bus_user.go);
// a receiver delivers them before the packet's events, and a packer never puts a user frame after
// an event in one packet, so publication order holds.
//
// or one fragment of an event too large for a packet (a tool call's long arguments, a long error):
//
//	{"r":"<replica>","q":<seq>,"f":{"id":<n>,"i":<index>,"n":<count>,"d":"<base64 part>"}}
//
// Packets of one replica are numbered (q) and arrive in order, since one goroutine sends them one
// after the other and PostgreSQL delivers notifications in commit order; a receiver that sees a gap
// (its connection dropped) counts it and forgets a half-received fragment. The final answer's
// content and its citations are not sent: receivers read them from the shared store by message id,
// as they must anyway to apply the stored link rule (DESIGN §4).
const (
	maxPacketBytes = 7900
	// packetOverhead bounds everything in a packet but its events: replica id, seq, brackets.
	packetOverhead = 400
	// maxReplicaIDBytes bounds a replica id so that packetOverhead holds.
	maxReplicaIDBytes = 200
	// fragmentBytes is one fragment's share of an event's encoding (base64 makes it 4/3 larger).
	fragmentBytes = 5400
	// maxFragments bounds one fragmented event (about 340 KiB), so a receiver's memory is bounded
	// whatever a sender does.
	maxFragments = 64
	// deltaPieceBytes is the size past which a queued answer.delta stops growing (coalescing) and
	// to which a larger one is cut (splitting). JSON escapes a byte to at most 6, so a piece always
	// fits a packet.
	deltaPieceBytes = 1200
	// maxOutboxItems bounds the events waiting to be published; past it new events are dropped
	// (counted) rather than holding a run or growing without bound while the broker is away.
	maxOutboxItems = 1 << 16
)

// wireEvent is an event as it travels: the agent's JSON form plus the moment it happened (unix
// nanoseconds), so the receiving hub's delta latency histogram measures from the source.
type wireEvent struct {
	agent.Event
	AtNanos int64 `json:"at,omitempty"`
}

type busPacket struct {
	Replica string            `json:"r"`
	Seq     uint64            `json:"q"`
	Users   []json.RawMessage `json:"u,omitempty"`
	Events  []json.RawMessage `json:"e,omitempty"`
	Cancel  []string          `json:"c,omitempty"`
	Close   []string          `json:"x,omitempty"`
	Ended   []string          `json:"d,omitempty"`
	Frag    *busFragment      `json:"f,omitempty"`
}

type busFragment struct {
	ID    uint64 `json:"id"`
	Index int    `json:"i"`
	Count int    `json:"n"`
	Data  []byte `json:"d"`
}

// busItem is one queued publication: an event, a user frame, a user whose connections close, a
// session whose run ended, or else a cancel request.
type busItem struct {
	ev        *agent.Event
	user      *userFrame
	closeUser string
	ended     string
	cancel    string
}

// userFrame is a websocket frame for every client of one user, already encoded.
type userFrame struct {
	User  string          `json:"u"`
	Frame json.RawMessage `json:"f"`
}

// maxUserFrameBytes bounds a user frame with its user id, so that it always fits a packet.
const maxUserFrameBytes = maxPacketBytes - packetOverhead - 32

// outbox queues publications without blocking the run that makes them. Consecutive answer.delta
// events of a run merge while they wait, so a slow broker sees fewer, larger deltas instead of a
// growing queue, and the run's frames keep their order.
type outbox struct {
	mu        sync.Mutex
	items     []busItem
	lastDelta map[string]int // run id → index of its queued delta, when that is the run's last item
	dropped   uint64
	wake      chan struct{}
}

func newOutbox() *outbox {
	return &outbox{lastDelta: make(map[string]int), wake: make(chan struct{}, 1)}
}

// push queues an item and reports whether it was kept.
func (o *outbox) push(it busItem) bool {
	o.mu.Lock()
	kept := o.pushLocked(it)
	o.mu.Unlock()
	if kept {
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
	return kept
}

func (o *outbox) pushLocked(it busItem) bool {
	if ev := it.ev; ev != nil && ev.Type == agent.EventAnswerDelta {
		if i, ok := o.lastDelta[ev.RunID]; ok {
			prev := o.items[i].ev
			if len(prev.Text)+len(ev.Text) <= deltaPieceBytes {
				merged := *prev
				merged.Text += ev.Text
				o.items[i].ev = &merged
				return true
			}
		}
	}
	if len(o.items) >= maxOutboxItems {
		o.dropped++
		if it.ev != nil {
			// The run's later deltas must not merge across the hole.
			delete(o.lastDelta, it.ev.RunID)
		}
		return false
	}
	o.items = append(o.items, it)
	if ev := it.ev; ev != nil {
		if ev.Type == agent.EventAnswerDelta {
			o.lastDelta[ev.RunID] = len(o.items) - 1
		} else {
			delete(o.lastDelta, ev.RunID)
		}
	}
	return true
}

// take returns everything queued and empties the queue.
func (o *outbox) take() []busItem {
	o.mu.Lock()
	defer o.mu.Unlock()
	items := o.items
	o.items = nil
	clear(o.lastDelta)
	return items
}

// packer turns queued items into packets of one replica.
type packer struct {
	replica string
	seq     uint64
	fragID  uint64
}

// pack encodes items into packets, in order, none larger than maxPacketBytes.
func (p *packer) pack(items []busItem) ([][]byte, error) {
	var out [][]byte
	cur := busPacket{Replica: p.replica}
	size := packetOverhead
	flush := func() error {
		if len(cur.Events) == 0 && len(cur.Cancel) == 0 && len(cur.Users) == 0 && len(cur.Close) == 0 && len(cur.Ended) == 0 {
			return nil
		}
		p.seq++
		cur.Seq = p.seq
		raw, err := marshalNoEscape(cur)
		if err != nil {
			return fmt.Errorf("bus: encode packet: %w", err)
		}
		out = append(out, raw)
		cur = busPacket{Replica: p.replica}
		size = packetOverhead
		return nil
	}
	add := func(raw []byte) error {
		if size+len(raw)+1 > maxPacketBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		cur.Events = append(cur.Events, raw)
		size += len(raw) + 1
		return nil
	}
	for _, it := range items {
		if it.user != nil {
			raw, err := marshalNoEscape(it.user)
			if err != nil {
				return nil, fmt.Errorf("bus: encode user frame: %w", err)
			}
			// Receivers deliver a packet's user frames before its events: one that follows an
			// event starts a new packet.
			if len(cur.Events) > 0 || size+len(raw)+1 > maxPacketBytes {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			cur.Users = append(cur.Users, raw)
			size += len(raw) + 1
			continue
		}
		if it.ev == nil {
			// A user to disconnect, a session whose run ended, or a cancel: one id in a list.
			id := cmp.Or(it.closeUser, it.ended, it.cancel)
			if len(id)+size+4 > maxPacketBytes {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			switch {
			case it.closeUser != "":
				cur.Close = append(cur.Close, id)
			case it.ended != "":
				cur.Ended = append(cur.Ended, id)
			default:
				cur.Cancel = append(cur.Cancel, id)
			}
			size += len(id) + 4
			continue
		}
		for _, ev := range splitDelta(*it.ev) {
			raw, err := encodeWireEvent(ev)
			if err != nil {
				return nil, err
			}
			if len(raw)+packetOverhead <= maxPacketBytes {
				if err := add(raw); err != nil {
					return nil, err
				}
				continue
			}
			// Too large for one packet: send it in fragments, after what is already batched so
			// the run's order holds.
			if err := flush(); err != nil {
				return nil, err
			}
			frags, err := p.fragments(raw)
			if err != nil {
				return nil, err
			}
			out = append(out, frags...)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// fragments cuts one encoded event into fragment packets.
func (p *packer) fragments(raw []byte) ([][]byte, error) {
	n := (len(raw) + fragmentBytes - 1) / fragmentBytes
	if n > maxFragments {
		return nil, fmt.Errorf("bus: event of %d bytes is larger than %d fragments", len(raw), maxFragments)
	}
	p.fragID++
	out := make([][]byte, 0, n)
	for i := range n {
		part := raw[i*fragmentBytes : min(len(raw), (i+1)*fragmentBytes)]
		p.seq++
		pk, err := marshalNoEscape(busPacket{Replica: p.replica, Seq: p.seq, Frag: &busFragment{ID: p.fragID, Index: i, Count: n, Data: part}})
		if err != nil {
			return nil, fmt.Errorf("bus: encode fragment: %w", err)
		}
		out = append(out, pk)
	}
	return out, nil
}

// splitDelta cuts an answer.delta larger than deltaPieceBytes into pieces at rune boundaries;
// other events come back as they are. The final answer's content and citations are dropped here
// (receivers read them from the store).
func splitDelta(ev agent.Event) []agent.Event {
	ev.Content, ev.Citations = "", nil
	if ev.Type != agent.EventAnswerDelta || len(ev.Text) <= deltaPieceBytes {
		return []agent.Event{ev}
	}
	var out []agent.Event
	text := ev.Text
	for text != "" {
		cut := min(len(text), deltaPieceBytes)
		for cut < len(text) && cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		if cut == 0 { // not UTF-8 at all; cut anywhere rather than loop
			cut = min(len(text), deltaPieceBytes)
		}
		piece := ev
		piece.Text = text[:cut]
		out = append(out, piece)
		text = text[cut:]
	}
	return out
}

func encodeWireEvent(ev agent.Event) ([]byte, error) {
	w := wireEvent{Event: ev}
	if !ev.At.IsZero() {
		w.AtNanos = ev.At.UnixNano()
	}
	raw, err := marshalNoEscape(w)
	if err != nil {
		return nil, fmt.Errorf("bus: encode event: %w", err)
	}
	return raw, nil
}

// marshalNoEscape is json.Marshal without HTML escaping, which would grow answer text with < > &
// sixfold (in embedded json.RawMessage too) and break the packet size arithmetic.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Receiver limits: how many publishing replicas a receiver remembers (replicas come and go with
// every restart; past the cap it starts over, costing at most one missed-gap report each).
const maxKnownReplicas = 1024

// errBadPacket marks a notification that is not a packet of ours; the receiver drops it.
var errBadPacket = errors.New("bus: malformed packet")

// unpacker decodes the packets of every other replica, checking their order and reassembling
// fragments.
type unpacker struct {
	self    string
	senders map[string]*senderState
	now     func() time.Time
	// gaps counts packets known lost (sequence gaps); dropped fragments count as one each.
	gaps uint64
	// bad counts events that did not decode.
	bad uint64
}

type senderState struct {
	seq   uint64
	frag  *busFragment // the fragment series being received
	parts [][]byte
}

func newUnpacker(self string, now func() time.Time) *unpacker {
	return &unpacker{self: self, senders: make(map[string]*senderState), now: now}
}

// unpacked is what one notification completes, in the order a receiver delivers it.
type unpacked struct {
	users   []userFrame   // frames for a user's clients
	events  []agent.Event // desktop run events, Channel set
	cancels []string      // session ids whose run is to be cancelled
	closes  []string      // user ids whose connections close
	ended   []string      // session ids whose run ended on the sender
}

// unpack decodes one notification payload. It returns the user frames, events and cancel requests
// it completes; a packet of this replica yields nothing. A payload that is not a packet is an error
// wrapping errBadPacket and changes no state; an event or user frame of a packet that does not
// decode is skipped and counted in bad.
func (u *unpacker) unpack(payload []byte) (unpacked, error) {
	var p busPacket
	if err := json.Unmarshal(payload, &p); err != nil {
		return unpacked{}, fmt.Errorf("%w: %v", errBadPacket, err)
	}
	if p.Replica == "" || len(p.Replica) > maxReplicaIDBytes || p.Seq == 0 {
		return unpacked{}, fmt.Errorf("%w: no replica or sequence", errBadPacket)
	}
	if p.Frag != nil && (p.Frag.Count < 1 || p.Frag.Count > maxFragments || p.Frag.Index < 0 || p.Frag.Index >= p.Frag.Count || len(p.Frag.Data) > maxPacketBytes) {
		return unpacked{}, fmt.Errorf("%w: fragment %d of %d", errBadPacket, p.Frag.Index, p.Frag.Count)
	}
	if p.Replica == u.self {
		return unpacked{}, nil
	}
	st := u.senders[p.Replica]
	if st == nil {
		if len(u.senders) >= maxKnownReplicas {
			clear(u.senders)
		}
		st = &senderState{seq: p.Seq - 1}
		u.senders[p.Replica] = st
	}
	if p.Seq <= st.seq {
		return unpacked{}, nil // a duplicate or a replayed packet
	}
	if p.Seq != st.seq+1 {
		u.gaps += p.Seq - st.seq - 1
		st.frag, st.parts = nil, nil
	}
	st.seq = p.Seq
	var raws []json.RawMessage
	if f := p.Frag; f != nil {
		switch {
		case f.Index == 0:
			if st.frag != nil {
				u.gaps++
			}
			st.frag, st.parts = f, [][]byte{f.Data}
		case st.frag == nil || st.frag.ID != f.ID || st.frag.Count != f.Count || len(st.parts) != f.Index:
			// The beginning of this series was lost.
			st.frag, st.parts = nil, nil
			return unpacked{}, nil
		default:
			st.parts = append(st.parts, f.Data)
		}
		if len(st.parts) < f.Count {
			return unpacked{}, nil
		}
		raws = []json.RawMessage{bytes.Join(st.parts, nil)}
		st.frag, st.parts = nil, nil
	} else {
		raws = p.Events
	}
	var evs []agent.Event
	for _, raw := range raws {
		var w wireEvent
		ev := &w.Event
		if err := json.Unmarshal(raw, &w); err != nil || ev.SessionID == "" || ev.RunID == "" || ev.Type == "" {
			u.bad++ // one event lost; the packet's others still count
			continue
		}
		ev.Channel = "desktop"
		if w.AtNanos != 0 {
			ev.At = time.Unix(0, w.AtNanos)
		} else {
			ev.At = u.now()
		}
		evs = append(evs, *ev)
	}
	cancels := nonEmpty(p.Cancel)
	closes, ended := nonEmpty(p.Close), nonEmpty(p.Ended)
	var users []userFrame
	if p.Frag == nil {
		for _, raw := range p.Users {
			var uf userFrame
			if err := json.Unmarshal(raw, &uf); err != nil || uf.User == "" || len(uf.Frame) == 0 || uf.Frame[0] != '{' {
				u.bad++
				continue
			}
			users = append(users, uf)
		}
	}
	return unpacked{users: users, events: evs, cancels: cancels, closes: closes, ended: ended}, nil
}

// nonEmpty returns the ids of a packet's list, trimmed, without empty ones.
func nonEmpty(ids []string) []string {
	var out []string
	for _, id := range ids {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

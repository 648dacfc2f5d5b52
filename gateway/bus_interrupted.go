package gateway

import (
	"encoding/json"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/store"
)

// Texts for a run whose replica died: the desktop's run.finished error and the chat notice.
const (
	interruptedError  = "回答中断：处理它的服务器停止了运行，请重新发送。"
	noticeInterrupted = "刚才的回答中断了：处理它的服务器停止了运行。请重新发送这条消息。"
)

// runOrigin is a chat message as recorded with its run (store.Run.Origin): enough for another
// replica to send a notice into the conversation.
type runOrigin struct {
	Channel        string          `json:"channel"`
	ID             string          `json:"id"`
	ConversationID string          `json:"conversationId"`
	SenderID       string          `json:"senderId,omitempty"`
	SenderName     string          `json:"senderName,omitempty"`
	Group          bool            `json:"group,omitempty"`
	Ref            json.RawMessage `json:"ref,omitempty"`
}

// originOf records m for its run. A Ref that does not encode is left out: channels rebuild what
// they can from the other fields.
func originOf(m channels.Message) json.RawMessage {
	o := runOrigin{Channel: m.Channel, ID: m.ID, ConversationID: m.ConversationID, SenderID: m.SenderID, SenderName: m.SenderName, Group: m.Group}
	if m.Ref != nil {
		if raw, err := json.Marshal(m.Ref); err == nil {
			o.Ref = raw
		}
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return nil
	}
	return raw
}

// message rebuilds the recorded message for ch.
func (o runOrigin) message(ch channels.Channel) channels.Message {
	m := channels.Message{Channel: o.Channel, ID: o.ID, ConversationID: o.ConversationID, SenderID: o.SenderID, SenderName: o.SenderName, Group: o.Group, Mentioned: true}
	if dec, ok := ch.(channels.RefDecoder); ok && len(o.Ref) > 0 {
		if ref, err := dec.DecodeRef(o.Ref); err == nil {
			m.Ref = ref
		}
	} else if len(o.Ref) > 0 {
		// A string Ref (WeChat's openid) needs no decoder.
		var s string
		if json.Unmarshal(o.Ref, &s) == nil {
			m.Ref = s
		}
	}
	return m
}

// RunInterrupted tells the desktop clients watching a run that another replica's Leases reaped
// (FAILED "interrupted" in the store): run.finished goes to this replica's clients and, through
// the bus, to every other replica's.
func (s *Server) RunInterrupted(r store.Run) {
	s.hub.onEvent(agent.Event{Type: agent.EventRunFinished, SessionID: r.SessionID, RunID: r.ID, Channel: r.Channel,
		Phase: store.PhaseFailed, Error: interruptedError, At: s.cfg.Now()})
}

// RunInterrupted tells the chat conversation of a reaped run that its answer stopped, through the
// conversation's channel (one of chans), and then TurnDone. The notice does not queue behind the
// conversation's replies here: those are of later turns, which waited for the reaped run
// (bus_order.go) and answer after it. Runs without a recorded origin (desktop runs, runs of an
// older version) have no conversation to tell.
func (d *Dispatcher) RunInterrupted(r store.Run, chans []channels.Channel) {
	ch, m, ok := d.interruptedChat(r, chans)
	if !ok {
		d.turnDone(r.SessionID)
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer d.turnDone(r.SessionID)
		d.send(d.ctx, ch, m, noticeInterrupted)
	}()
}

// interruptedChat is the channel and message to answer for a reaped run, if it has a chat to tell.
func (d *Dispatcher) interruptedChat(r store.Run, chans []channels.Channel) (channels.Channel, channels.Message, bool) {
	if len(r.Origin) == 0 {
		return nil, channels.Message{}, false
	}
	var o runOrigin
	if err := json.Unmarshal(r.Origin, &o); err != nil || o.Channel == "" || o.ConversationID == "" {
		d.log.Warn("interrupted run: unreadable origin; its conversation is not told", "run", r.ID, "err", err)
		return nil, channels.Message{}, false
	}
	for _, ch := range chans {
		if ch.Name() == o.Channel {
			return ch, o.message(ch), true
		}
	}
	d.log.Warn("interrupted run: its channel is not configured here; its conversation is not told", "run", r.ID, "channel", o.Channel)
	return nil, channels.Message{}, false
}

package feishu

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"

	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/citegate/citegate/channels"
)

// EventMessageReceive is the one event the channel acts on.
const EventMessageReceive = "im.message.receive_v1"

// ignoredEvents are IM events an app commonly subscribes to next to message receipt. They are
// acknowledged without action: an event type with no handler is answered with an error, which makes
// Feishu push it again and again.
var ignoredEvents = []string{
	"im.message.message_read_v1",
	"im.message.recalled_v1",
	"im.message.reaction.created_v1",
	"im.message.reaction.deleted_v1",
	"im.chat.access_event.bot_p2p_chat_entered_v1",
	"im.chat.member.bot.added_v1",
	"im.chat.member.bot.deleted_v1",
	"im.chat.member.user.added_v1",
	"im.chat.member.user.deleted_v1",
	"im.chat.member.user.withdrawn_v1",
	"im.chat.disbanded_v1",
	"im.chat.updated_v1",
}

// maxWebhookBody bounds a webhook request; Feishu events are a few KB.
const maxWebhookBody = 1 << 20

// errNotRunning refuses an event while the channel is stopped, so Feishu re-delivers it later.
var errNotRunning = errors.New("feishu: channel not running")

// errTokenMismatch rejects a webhook event whose verification token is wrong.
var errTokenMismatch = errors.New("feishu: verification token mismatch")

// Ref is what a Feishu message carries for replying (channels.Message.Ref).
type Ref struct {
	MessageID string // the user's message: replies thread onto it
	ChatID    string
}

func (c *Channel) newEventDispatcher(token, encryptKey string) *dispatcher.EventDispatcher {
	d := dispatcher.NewEventDispatcher(token, encryptKey)
	d.OnP2MessageReceiveV1(c.onMessageReceive)
	for _, et := range ignoredEvents {
		d.OnCustomizedEvent(et, func(context.Context, *larkevent.EventReq) error { return nil })
	}
	return d
}

// onMessageReceive handles im.message.receive_v1 from either transport. It only converts and hands
// over; the dispatcher does the rest asynchronously, so the ack goes back within Feishu's 3 s.
func (c *Channel) onMessageReceive(_ context.Context, ev *larkim.P2MessageReceiveV1) (err error) {
	if c.cfg.Mode == ModeWebhook {
		// With no encrypt key the SDK checks the token only on the URL challenge; check every event.
		var got string
		if ev.EventV2Base != nil && ev.EventV2Base.Header != nil {
			got = ev.EventV2Base.Header.Token
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(c.cfg.VerificationToken)) != 1 {
			c.log.Warn("feishu event rejected: verification token mismatch")
			return errTokenMismatch
		}
	}
	h, runCtx := c.active()
	if h == nil {
		return errNotRunning
	}
	m, ok := c.toMessage(ev)
	if !ok {
		return nil
	}
	var eventID string
	if ev.EventV2Base != nil && ev.EventV2Base.Header != nil {
		eventID = ev.EventV2Base.Header.EventID
	}
	c.log.Debug("feishu message received", "message_id", m.ID, "event_id", eventID, "chat_id", m.ConversationID, "group", m.Group, "mentioned", m.Mentioned)
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("feishu message handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("feishu: handler panicked: %v", r)
		}
	}()
	h.HandleMessage(runCtx, m)
	return nil
}

// mentionKey matches the placeholders Feishu puts in text for mentions ("@_user_1", "@_all").
var mentionKey = regexp.MustCompile(`@_user_\d+|@_all`)

// toMessage converts a receive event; ok is false for events that carry nothing to answer (images,
// stickers, malformed content).
func (c *Channel) toMessage(ev *larkim.P2MessageReceiveV1) (channels.Message, bool) {
	if ev == nil || ev.Event == nil || ev.Event.Message == nil {
		return channels.Message{}, false
	}
	msg := ev.Event.Message
	id, chatID := deref(msg.MessageId), deref(msg.ChatId)
	if id == "" || chatID == "" {
		c.log.Warn("feishu event without message_id or chat_id ignored")
		return channels.Message{}, false
	}
	var text string
	switch t := deref(msg.MessageType); t {
	case "text":
		var body struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal([]byte(deref(msg.Content)), &body); err != nil {
			c.log.Warn("feishu text message with bad content ignored", "message_id", id, "err", err)
			return channels.Message{}, false
		}
		text = body.Text
	case "post":
		text = postText(deref(msg.Content))
	default:
		c.log.Info("feishu message type not supported, ignored", "message_id", id, "type", t)
		return channels.Message{}, false
	}

	botID := c.BotOpenID()
	mentioned := false
	names := map[string]string{}
	for _, mn := range msg.Mentions {
		if mn == nil {
			continue
		}
		key := deref(mn.Key)
		if mn.Id != nil && botID != "" && deref(mn.Id.OpenId) == botID {
			mentioned = true
			names[key] = ""
			continue
		}
		if name := deref(mn.Name); name != "" {
			names[key] = "@" + name
		}
	}
	// Mention keys are placeholders, not words: the bot's own goes, others become "@Name".
	text = mentionKey.ReplaceAllStringFunc(text, func(k string) string { return names[k] })
	text = tidy(text)

	var senderID string
	if ev.Event.Sender != nil && ev.Event.Sender.SenderId != nil {
		senderID = deref(ev.Event.Sender.SenderId.OpenId)
	}
	return channels.Message{
		Channel:        Name,
		ID:             id,
		ConversationID: chatID,
		SenderID:       senderID,
		Group:          deref(msg.ChatType) != "p2p",
		Mentioned:      mentioned,
		Text:           text,
		Ref:            Ref{MessageID: id, ChatID: chatID},
	}, true
}

// postText flattens a rich-text (post) message into plain text: one line per paragraph, the text of
// text/link/at/code elements in order. Receive events carry {"title","content"}; a language-keyed
// form ({"zh_cn":{…}}) is accepted too.
func postText(content string) string {
	type elem struct {
		Tag      string `json:"tag"`
		Text     string `json:"text"`
		Href     string `json:"href"`
		UserID   string `json:"user_id"`
		UserName string `json:"user_name"`
	}
	type post struct {
		Title   string   `json:"title"`
		Content [][]elem `json:"content"`
	}
	var p post
	if err := json.Unmarshal([]byte(content), &p); err != nil || (p.Title == "" && len(p.Content) == 0) {
		var byLang map[string]post
		if json.Unmarshal([]byte(content), &byLang) != nil {
			return ""
		}
		for _, lp := range byLang {
			if lp.Title != "" || len(lp.Content) > 0 {
				p = lp
				break
			}
		}
	}
	var lines []string
	if p.Title != "" {
		lines = append(lines, p.Title)
	}
	for _, para := range p.Content {
		var b strings.Builder
		for _, e := range para {
			switch e.Tag {
			case "at":
				b.WriteString(e.UserID) // "@_user_N": resolved with the mentions list
			case "a":
				if e.Text != "" {
					b.WriteString(e.Text)
				} else {
					b.WriteString(e.Href)
				}
			default:
				b.WriteString(e.Text)
			}
		}
		if s := strings.TrimSpace(b.String()); s != "" {
			lines = append(lines, s)
		}
	}
	return strings.Join(lines, "\n")
}

// tidy collapses runs of spaces (left by removed mentions) within each line and drops empty lines.
func tidy(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func writeJSON(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"msg": msg})
	_, _ = w.Write(b)
}

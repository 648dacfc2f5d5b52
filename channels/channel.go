// Package channels defines the interface between chat platforms (Feishu/Lark, DingTalk, WeChat) and
// the gateway. Each platform lives in its own subpackage behind the Channel interface and only moves
// messages: it imports neither the agent nor the store. What is common — durable dedup, sessions per
// conversation, chat commands, reply queues, and making every outbound text safe (no citation
// marker, no unverified link) — is the gateway's Dispatcher. Every text an adapter is given is
// safe already; adapters send it as it is and never strip or filter it again, so the rule lives in
// one place (gateway/outbound.go) and costs one pass per text.
package channels

import (
	"context"
	"errors"
	"net/http"
)

// Message is one inbound chat message, already verified (signature, token) by its channel.
type Message struct {
	Channel        string // "feishu", "dingtalk", "wechat"
	ID             string // the platform's message id: the durable dedup key
	ConversationID string // chat/conversation id (group or private), or the user id for 1:1-only platforms
	SenderID       string // platform user id
	SenderName     string
	Group          bool
	Mentioned      bool   // in groups: whether the bot was @-mentioned
	Text           string // mention already removed, trimmed
	// Ref carries what the channel needs to reply (message id, session webhook, open id, …). The
	// dispatcher never looks inside.
	Ref any
}

// Handler receives inbound messages. HandleMessage returns quickly (the platform's ack window); the
// run happens asynchronously.
type Handler interface {
	HandleMessage(ctx context.Context, m Message)
}

// Reply is the outbound stream of one answer. The dispatcher calls Start once, then Update any number
// of times with the full safe text so far (no marker, no unverified link; each extending the
// previous one, at most Limits.UpdatesPerSecond), then exactly one of Finish or Fail. Implementations split or truncate to
// the platform's limits with a visible note.
type Reply interface {
	Start(ctx context.Context) error
	Update(ctx context.Context, text string) error
	Finish(ctx context.Context, text string) error
	Fail(ctx context.Context, reason string) error
}

// Limits tells the dispatcher how to pace a channel's Reply.
type Limits struct {
	// UpdatesPerSecond bounds Reply.Update calls; 0 means the channel does not stream (Update is not
	// called at all).
	UpdatesPerSecond float64
}

// Channel is one chat platform.
type Channel interface {
	// Name is the channel's key: "feishu", "dingtalk", "wechat".
	Name() string
	// Start connects to the platform and delivers inbound messages to h until ctx ends. It returns an
	// error when the channel cannot start (bad credentials, an endpoint that refuses it); the gateway
	// logs it and keeps the other channels running. Transient network failures are retried inside
	// Start rather than returned, so a gateway started during a network blip still comes up. Channels
	// that only receive webhooks return once they are ready.
	Start(ctx context.Context, h Handler) error
	// Reply opens the reply stream for an answer to m.
	Reply(ctx context.Context, m Message) (Reply, error)
	// Send sends one plain text message in m's conversation (command answers, notices).
	Send(ctx context.Context, m Message, text string) error
	// Limits is the pacing the channel needs.
	Limits() Limits
}

// WebhookChannel is a Channel that also receives events over HTTP; the gateway mounts its routes.
type WebhookChannel interface {
	Channel
	// Routes maps URL paths (e.g. "/channels/wechat") to handlers. The handlers hand messages to the
	// Handler that Start received; before Start they answer 503.
	Routes() map[string]http.Handler
}

// IsPermanent reports whether err (from a Reply or Send) says that sending the same text again another
// way cannot succeed either, e.g. WeChat's closed 48-hour window. Channels mark such errors with a
// `Permanent() bool` method.
func IsPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

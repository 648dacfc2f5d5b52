// Package dingtalk is citegate's DingTalk channel. Inbound chatbot messages arrive over DingTalk's
// Stream mode through a connection loop of our own (the SDK's v0.9.1 stream client can crash the
// process after a ping timeout, in a goroutine we cannot recover), using the SDK's payload and chatbot
// wire types. Answers go out as an AI card that streams the text when a card template is configured,
// otherwise as markdown through the message's session webhook, falling back to the robot OpenAPI
// when the webhook has expired or reports an error.
package dingtalk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/citegate/citegate/channels"
)

// Name is the channel's key.
const Name = "dingtalk"

// DefaultBaseURL is DingTalk's public OpenAPI and Stream gateway host.
const DefaultBaseURL = "https://api.dingtalk.com"

// Config configures the DingTalk channel.
type Config struct {
	ClientID, ClientSecret string // the app's AppKey / AppSecret (required)
	// CardTemplateID, when set, makes answers stream into an AI card built from this template;
	// empty → one markdown message at the end.
	CardTemplateID string
	// CardContentKey is the template variable that holds the answer text; default "content".
	CardContentKey string
	RobotCode      string // default ClientID
	APIBaseURL     string // default https://api.dingtalk.com (OpenAPI: token, robot send, cards)
	StreamBaseURL  string // default https://api.dingtalk.com (connections/open)
	// BotName, when set, is removed from the start of a group message ("@BotName question"). DingTalk
	// normally removes the mention itself; this covers clients that do not.
	BotName string
	// KeepAlive is the websocket ping interval; a connection that shows no sign of life (no pong, no
	// frame) for KeepAlive plus min(KeepAlive, 10s) is abandoned and a new one opened. Default 30s.
	KeepAlive time.Duration
	// ReconnectBackoff is the first delay between failed connection attempts; it doubles up to
	// MaxReconnectBackoff, with jitter. Defaults 1s and 60s.
	ReconnectBackoff    time.Duration
	MaxReconnectBackoff time.Duration
	HTTPClient          *http.Client // default: a client with a 15 s timeout
	Logger              *slog.Logger
}

// Channel is the DingTalk channel; it implements channels.Channel.
type Channel struct {
	cfg Config
	log *slog.Logger
	api *apiClient
	// webhookHTTP posts to session webhooks (which need no access token).
	webhookHTTP *http.Client
	now         func() time.Time
}

var _ channels.Channel = (*Channel)(nil)

// New checks cfg and returns the channel. It makes no network call; Start connects.
func New(cfg Config) (*Channel, error) {
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("dingtalk: client_id and client_secret are required")
	}
	if cfg.CardContentKey == "" {
		cfg.CardContentKey = "content"
	}
	if cfg.RobotCode == "" {
		cfg.RobotCode = cfg.ClientID
	}
	if cfg.APIBaseURL == "" {
		cfg.APIBaseURL = DefaultBaseURL
	}
	if cfg.StreamBaseURL == "" {
		cfg.StreamBaseURL = DefaultBaseURL
	}
	cfg.APIBaseURL = strings.TrimRight(cfg.APIBaseURL, "/")
	cfg.StreamBaseURL = strings.TrimRight(cfg.StreamBaseURL, "/")
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 30 * time.Second
	}
	if cfg.ReconnectBackoff <= 0 {
		cfg.ReconnectBackoff = time.Second
	}
	if cfg.MaxReconnectBackoff <= 0 {
		cfg.MaxReconnectBackoff = time.Minute
	}
	cfg.MaxReconnectBackoff = max(cfg.MaxReconnectBackoff, cfg.ReconnectBackoff)
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// No "channel" attribute here: the gateway's logger usually carries it already, and every message
	// starts with "dingtalk:".
	c := &Channel{
		cfg:         cfg,
		log:         log,
		webhookHTTP: cfg.HTTPClient,
		now:         time.Now,
		api: &apiClient{
			base:           cfg.APIBaseURL,
			appKey:         cfg.ClientID,
			appSecret:      cfg.ClientSecret,
			http:           cfg.HTTPClient,
			log:            log,
			retryBase:      250 * time.Millisecond,
			maxRateRetries: 3,
		},
	}
	return c, nil
}

// Name returns "dingtalk".
func (c *Channel) Name() string { return Name }

// Limits: an AI card takes about 4 streaming updates a second; markdown messages cannot be edited,
// so without a card the channel does not stream.
func (c *Channel) Limits() channels.Limits {
	if c.cfg.CardTemplateID != "" {
		return channels.Limits{UpdatesPerSecond: 4}
	}
	return channels.Limits{}
}

// Ref is what the channel needs to answer a message; it travels in channels.Message.Ref.
type Ref struct {
	MsgID            string
	ConversationID   string // openConversationId for groups
	Group            bool
	StaffID          string // senderStaffId: needed for 1:1 OpenAPI sends and 1:1 cards
	SessionWebhook   string
	WebhookExpiresAt time.Time // zero: unknown (the webhook is tried and its errcode decides)
}

func refOf(m channels.Message) (*Ref, error) {
	switch r := m.Ref.(type) {
	case *Ref:
		if r != nil {
			return r, nil
		}
	case Ref:
		return &r, nil
	}
	return nil, fmt.Errorf("dingtalk: message %q carries no dingtalk reference", m.ID)
}

// Send sends text as one markdown message (split when long) in m's conversation.
func (c *Channel) Send(ctx context.Context, m channels.Message, text string) error {
	ref, err := refOf(m)
	if err != nil {
		return err
	}
	d := &deliverer{c: c, ref: ref}
	return d.markdown(ctx, text)
}

// Reply opens the reply stream for an answer to m.
func (c *Channel) Reply(ctx context.Context, m channels.Message) (channels.Reply, error) {
	ref, err := refOf(m)
	if err != nil {
		return nil, err
	}
	r := &reply{c: c, ref: ref, d: &deliverer{c: c, ref: ref}, card: c.cfg.CardTemplateID != ""}
	return r, nil
}

// deliverer sends markdown to one conversation: session webhook while it lives, robot OpenAPI after.
// It remembers a webhook failure so later parts of the same answer go straight to the OpenAPI.
type deliverer struct {
	c          *Channel
	ref        *Ref
	webhookBad bool
}

// webhookUsable reports whether the session webhook can still be tried.
func (d *deliverer) webhookUsable() bool {
	if d.webhookBad || d.ref.SessionWebhook == "" {
		return false
	}
	// A small margin: a request that starts a second before expiry would arrive after it.
	return d.ref.WebhookExpiresAt.IsZero() || d.c.now().Before(d.ref.WebhookExpiresAt.Add(-10*time.Second))
}

// markdown sends text (already stripped) as one or more markdown messages. Blank text sends nothing:
// DingTalk rejects an empty markdown body.
func (d *deliverer) markdown(ctx context.Context, text string) error {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	parts := splitMarkdown(text, markdownMaxRunes, markdownMaxBytes)
	for i, p := range parts {
		title := titleOf(text)
		if len(parts) > 1 {
			title = fmt.Sprintf("%s (%d/%d)", title, i+1, len(parts))
			if i < len(parts)-1 {
				p += fmt.Sprintf("\n\n*（第 %d/%d 部分，未完待续）*", i+1, len(parts))
			} else {
				p += fmt.Sprintf("\n\n*（第 %d/%d 部分，完）*", i+1, len(parts))
			}
		}
		if err := d.send(ctx, title, p); err != nil {
			if len(parts) > 1 {
				return fmt.Errorf("dingtalk: part %d/%d: %w", i+1, len(parts), err)
			}
			return err
		}
	}
	return nil
}

// send delivers one markdown message.
func (d *deliverer) send(ctx context.Context, title, text string) error {
	if d.webhookUsable() {
		err := d.c.webhookMarkdown(ctx, d.ref.SessionWebhook, title, text)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		d.webhookBad = true
		d.c.log.Warn("dingtalk: session webhook failed, falling back to robot OpenAPI", "msg_id", d.ref.MsgID, "err", err)
	}
	return d.c.robotMarkdown(ctx, d.ref, title, text)
}

// WebhookError is a session-webhook failure: a non-200 status or a non-zero errcode in a 200 body.
type WebhookError struct {
	Status  int
	Errcode int
	Errmsg  string
}

func (e *WebhookError) Error() string {
	return fmt.Sprintf("dingtalk: session webhook: HTTP %d errcode=%d: %s", e.Status, e.Errcode, e.Errmsg)
}

// webhookMarkdown posts one markdown message to a session webhook. Unlike the SDK's ChatbotReplier it
// reads the body: DingTalk reports failures as HTTP 200 with a non-zero errcode.
func (c *Channel) webhookMarkdown(ctx context.Context, webhook, title, text string) error {
	body, _ := json.Marshal(map[string]any{
		"msgtype":  "markdown",
		"markdown": map[string]string{"title": title, "text": text},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, webhook, strings.NewReader(string(body)))
	if err != nil {
		return fmt.Errorf("dingtalk: session webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.webhookHTTP.Do(req)
	if err != nil {
		// The URL carries the session credential; keep it out of logs and errors.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("dingtalk: session webhook: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Errcode int    `json:"errcode"`
		Errmsg  string `json:"errmsg"`
	}
	decErr := json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusOK {
		return &WebhookError{Status: resp.StatusCode, Errcode: out.Errcode, Errmsg: out.Errmsg}
	}
	if decErr != nil {
		return &WebhookError{Status: resp.StatusCode, Errcode: -1, Errmsg: "unreadable response: " + decErr.Error()}
	}
	if out.Errcode != 0 {
		return &WebhookError{Status: resp.StatusCode, Errcode: out.Errcode, Errmsg: out.Errmsg}
	}
	return nil
}

// robotMarkdown sends one markdown message through the robot OpenAPI.
func (c *Channel) robotMarkdown(ctx context.Context, ref *Ref, title, text string) error {
	param := msgParam(title, text)
	if ref.Group {
		if ref.ConversationID == "" {
			return errors.New("dingtalk: robot send: group message without conversation id")
		}
		req := map[string]any{
			"robotCode":          c.cfg.RobotCode,
			"openConversationId": ref.ConversationID,
			"msgKey":             "sampleMarkdown",
			"msgParam":           param,
		}
		if err := c.api.call(ctx, "robot group send", http.MethodPost, "/v1.0/robot/groupMessages/send", req, nil); err != nil {
			c.logAPIError("robot group send", ref, err)
			return err
		}
		return nil
	}
	if ref.StaffID == "" {
		return errors.New("dingtalk: robot send: sender has no staff id (external user?) and the session webhook is unusable")
	}
	req := map[string]any{
		"robotCode": c.cfg.RobotCode,
		"userIds":   []string{ref.StaffID},
		"msgKey":    "sampleMarkdown",
		"msgParam":  param,
	}
	var out struct {
		InvalidStaffIDList        []string `json:"invalidStaffIdList"`
		FlowControlledStaffIDList []string `json:"flowControlledStaffIdList"`
	}
	if err := c.api.call(ctx, "robot 1:1 send", http.MethodPost, "/v1.0/robot/oToMessages/batchSend", req, &out); err != nil {
		c.logAPIError("robot 1:1 send", ref, err)
		return err
	}
	if len(out.InvalidStaffIDList) > 0 || len(out.FlowControlledStaffIDList) > 0 {
		return fmt.Errorf("dingtalk: robot 1:1 send: not delivered (invalid %v, flow-controlled %v)", out.InvalidStaffIDList, out.FlowControlledStaffIDList)
	}
	return nil
}

func (c *Channel) logAPIError(op string, ref *Ref, err error) {
	var ae *APIError
	if errors.As(err, &ae) {
		c.log.Error("dingtalk: api call failed", "op", op, "msg_id", ref.MsgID, "status", ae.Status, "code", ae.Code, "requestid", ae.RequestID)
		return
	}
	c.log.Error("dingtalk: api call failed", "op", op, "msg_id", ref.MsgID, "err", err)
}

// titleOf derives a markdown title (shown in notifications and the chat list) from the text's first
// non-empty line, without markdown decoration, at most 20 runes.
func titleOf(text string) string {
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "#>*-+ `"))
		line = strings.NewReplacer("**", "", "__", "", "`", "").Replace(line)
		if line == "" {
			continue
		}
		if utf8.RuneCountInString(line) > 20 {
			r := []rune(line)
			line = string(r[:20]) + "…"
		}
		return line
	}
	return "回答"
}

// msgParam encodes the markdown template parameters. HTML escaping is off: DingTalk limits msgParam
// to 15000 bytes, and "<" as "\u003c" would cost six.
func msgParam(title, text string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"title": title, "text": text})
	return strings.TrimSuffix(b.String(), "\n")
}

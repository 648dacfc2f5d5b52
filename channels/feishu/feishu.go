// Package feishu connects citegate to Feishu/Lark through github.com/larksuite/oapi-sdk-go/v3.
//
// Inbound messages arrive over Feishu's long connection (default; citegate's own client of the
// websocket protocol, with the SDK's frame codec and event dispatcher) or over a webhook
// ("/channels/feishu/events"); answers stream into a CardKit card whose markdown element is updated
// with the full marker-free text, with a plain text reply as the fallback when CardKit is disabled or
// fails.
package feishu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	lark "github.com/larksuite/oapi-sdk-go/v3"
	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"

	"github.com/citegate/citegate/channels"
)

// Name is the channel key used in configuration, logs and channels.Message.Channel.
const Name = "feishu"

// WebhookPath is the route the channel serves in webhook mode.
const WebhookPath = "/channels/feishu/events"

// Modes of receiving events.
const (
	ModeLongConn = "longconn"
	ModeWebhook  = "webhook"
)

// DefaultBaseURL is Feishu's public open platform endpoint (Lark users set https://open.larksuite.com).
const DefaultBaseURL = "https://open.feishu.cn"

// Config configures the Feishu channel.
type Config struct {
	AppID, AppSecret string
	// Mode is "longconn" (default) or "webhook".
	Mode string
	// VerificationToken is required in webhook mode; EncryptKey enables decryption and signature
	// checks of webhook requests.
	VerificationToken, EncryptKey string
	// BaseURL is the open platform base URL for both the REST API and the long-connection endpoint.
	BaseURL string
	// DisableCardKit makes every answer a plain text reply (no streaming card).
	DisableCardKit bool
	Logger         *slog.Logger
	// Now is the clock webhook timestamps are checked against; nil means time.Now.
	Now func() time.Time
	// ReconnectBackoff is the first delay between failed long-connection attempts; it doubles up
	// to MaxReconnectBackoff, with jitter. After a connection that worked, the next one is opened
	// within ReconnectBackoff (or the server's ReconnectNonce, if shorter). Defaults 1s and 60s.
	ReconnectBackoff    time.Duration
	MaxReconnectBackoff time.Duration
}

// Channel is the Feishu/Lark channel. It implements channels.WebhookChannel.
type Channel struct {
	cfg    Config
	log    *slog.Logger
	client *lark.Client
	tokens tokenSource
	now    func() time.Time
	// httpClient asks for long-connection endpoints (the SDK's REST client does the rest).
	httpClient *http.Client

	mu        sync.Mutex
	handler   channels.Handler
	runCtx    context.Context // the ctx Start received: inbound runs live as long as the channel
	botOpenID string
	started   bool

	webhook http.Handler
}

var _ channels.WebhookChannel = (*Channel)(nil)

// New validates cfg and builds the channel. Nothing touches the network until Start.
func New(cfg Config) (*Channel, error) {
	cfg.AppID = strings.TrimSpace(cfg.AppID)
	if cfg.AppID == "" || cfg.AppSecret == "" {
		return nil, errors.New("feishu: app_id and app_secret are required")
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = ModeLongConn
	case ModeLongConn, ModeWebhook:
	default:
		return nil, fmt.Errorf("feishu: unknown mode %q (want %q or %q)", cfg.Mode, ModeLongConn, ModeWebhook)
	}
	if cfg.Mode == ModeWebhook && cfg.VerificationToken == "" {
		return nil, errors.New("feishu: webhook mode needs verification_token")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.ReconnectBackoff <= 0 {
		cfg.ReconnectBackoff = time.Second
	}
	if cfg.MaxReconnectBackoff < cfg.ReconnectBackoff {
		cfg.MaxReconnectBackoff = max(60*time.Second, cfg.ReconnectBackoff)
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://") {
		return nil, fmt.Errorf("feishu: base_url %q must start with http:// or https://", cfg.BaseURL)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("channel", Name)
	c := &Channel{
		cfg: cfg,
		log: logger,
		// The SDK's own token cache is process-global and its retry on an invalid token reuses the
		// stale token, so the channel keeps its own tenant token and hands it to every call.
		client: lark.NewClient(cfg.AppID, cfg.AppSecret,
			lark.WithOpenBaseUrl(cfg.BaseURL),
			lark.WithEnableTokenCache(false),
			lark.WithLogger(newLarkLogger(logger)),
			lark.WithLogLevel(larkcore.LogLevelInfo),
			lark.WithReqTimeout(30*time.Second),
		),
		now:        cfg.Now,
		httpClient: &http.Client{Timeout: 30 * time.Second},
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.tokens = tokenSource{c: c}
	c.webhook = c.newWebhookHandler()
	return c, nil
}

// Name implements channels.Channel.
func (c *Channel) Name() string { return Name }

// Limits implements channels.Channel: five card updates a second leave room for the card's other
// operations inside CardKit's ten operations per second per card.
func (c *Channel) Limits() channels.Limits { return channels.Limits{UpdatesPerSecond: 5} }

// Routes implements channels.WebhookChannel. In long-connection mode there are none.
func (c *Channel) Routes() map[string]http.Handler {
	if c.cfg.Mode != ModeWebhook {
		return nil
	}
	return map[string]http.Handler{WebhookPath: c.webhook}
}

// BotOpenID is the bot's open_id learned at Start ("" before).
func (c *Channel) BotOpenID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.botOpenID
}

// Start checks the credentials (tenant token, bot info) and begins receiving. In webhook mode it
// returns nil once ready; in long-connection mode it blocks until ctx ends, or returns the error that
// keeps the connection from starting.
func (c *Channel) Start(ctx context.Context, h channels.Handler) error {
	if h == nil {
		return errors.New("feishu: nil handler")
	}
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("feishu: channel already started")
	}
	c.started = true
	c.mu.Unlock()

	if _, err := c.tokens.get(ctx, true); err != nil {
		c.resetStarted()
		var ae *APIError
		if errors.As(err, &ae) {
			return fmt.Errorf("feishu: app_id/app_secret rejected: %w", err)
		}
		// No answer at all: the platform (or the configured base_url) is out of reach; the
		// credentials were never looked at.
		return fmt.Errorf("feishu: cannot reach %s: %w", c.cfg.BaseURL, err)
	}
	openID, err := c.fetchBotOpenID(ctx)
	if err != nil {
		c.resetStarted()
		return fmt.Errorf("feishu: bot info (is the bot capability enabled?): %w", err)
	}

	c.mu.Lock()
	c.botOpenID = openID
	c.handler = h
	c.runCtx = ctx
	c.mu.Unlock()
	c.log.Info("feishu channel ready", "mode", c.cfg.Mode, "bot_open_id", openID)
	// A webhook channel is connected once Start returns; the long connection tells the supervisor
	// itself, whenever its socket opens and when a reconnect fails (runLongConn).
	if c.cfg.Mode == ModeWebhook {
		return nil
	}
	return c.runLongConn(ctx)
}

func (c *Channel) resetStarted() {
	c.mu.Lock()
	c.started = false
	c.mu.Unlock()
}

// active returns the handler and the run context, or nil when the channel is not (or no longer)
// running, so an event can be refused and the platform re-delivers it later.
func (c *Channel) active() (channels.Handler, context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handler == nil || c.runCtx == nil || c.runCtx.Err() != nil {
		return nil, nil
	}
	return c.handler, c.runCtx
}

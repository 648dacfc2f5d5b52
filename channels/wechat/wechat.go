// Package wechat connects a WeChat Official Account (公众号) to citegate. Inbound messages arrive on
// the webhook /channels/wechat: the signature (and, in safe mode, the AES envelope) is checked and the
// XML parsed with github.com/silenceper/wechat/v2, WeChat gets "success" at once, and the message goes
// to the dispatcher. Answers go out through the customer-service message API (客服消息) with a typing
// indicator while the agent runs, because WeChat gives a webhook only 5 seconds and has no streaming.
package wechat

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/silenceper/wechat/v2/cache"
	"github.com/silenceper/wechat/v2/officialaccount"
	"github.com/silenceper/wechat/v2/officialaccount/config"
	"github.com/silenceper/wechat/v2/officialaccount/message"
	"github.com/silenceper/wechat/v2/util"

	"github.com/citegate/citegate/channels"
)

// Name is the channel's key.
const Name = "wechat"

// Route is the webhook path WeChat is configured to call (服务器地址(URL)).
const Route = "/channels/wechat"

// DefaultAPIBaseURL is WeChat's public API endpoint.
const DefaultAPIBaseURL = "https://api.weixin.qq.com"

// UnsupportedNotice answers messages that are not text (images, locations, …).
const UnsupportedNotice = "暂只支持文字消息"

// maxBody bounds a webhook body; WeChat's XML messages are a few kilobytes.
const maxBody = 1 << 20

// Config configures the channel. AppID, AppSecret and Token are required; EncodingAESKey (43
// characters) is required only when the account uses safe mode (安全模式) or compatible mode.
type Config struct {
	AppID, AppSecret, Token, EncodingAESKey string
	APIBaseURL                              string // default https://api.weixin.qq.com
	Logger                                  *slog.Logger
	// HTTPClient sends the outbound API calls; nil means a client with a 15 s timeout.
	HTTPClient *http.Client
	// Now is the clock the timestamp window is checked against; nil means time.Now.
	Now func() time.Time
	// Replay remembers (timestamp, nonce) pairs already accepted. Nil means an in-memory cache,
	// which forgets on restart; serve passes the store (UseReplayGuard) so it does not.
	Replay ReplayGuard
}

// Channel is the WeChat Official Account channel. It implements channels.WebhookChannel.
type Channel struct {
	cfg Config
	oa  *officialaccount.OfficialAccount
	api *apiClient
	log *slog.Logger

	started atomic.Pointer[startState]

	now    func() time.Time
	replay ReplayGuard
	bodies *recentBodies

	// typingEvery re-sends the typing indicator, which WeChat shows for about 15 seconds, while a run
	// lasts; typingFor bounds how long a reply keeps it alive if it is never finished.
	typingEvery, typingFor time.Duration
	// handoffWait bounds how long the webhook waits for the dispatcher before acknowledging.
	handoffWait time.Duration
}

// startState is what Start hands to the webhook: the dispatcher and the channel's lifetime.
type startState struct {
	ctx context.Context
	h   channels.Handler
}

var _ channels.WebhookChannel = (*Channel)(nil)

// New checks cfg and builds the channel. It does not contact WeChat; Start does.
func New(cfg Config) (*Channel, error) {
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"app_id", cfg.AppID}, {"app_secret", cfg.AppSecret}, {"token", cfg.Token},
	} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("wechat: missing config %s", strings.Join(missing, ", "))
	}
	if cfg.EncodingAESKey != "" {
		if err := checkAESKey(cfg.EncodingAESKey); err != nil {
			return nil, err
		}
	}
	if cfg.APIBaseURL == "" {
		cfg.APIBaseURL = DefaultAPIBaseURL
	}
	base, err := trimBase(cfg.APIBaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Replay == nil {
		cfg.Replay = newMemoryGuard(cfg.Now)
	}
	// Every message starts with "wechat:"; the caller may add a channel attribute of its own.
	log := cfg.Logger
	// The SDK object serves the inbound side only (signature, decryption, parsing). Its cache is
	// required (nil panics) even though the channel fetches tokens itself. The SDK's root package
	// (wechat.NewWechat) is deliberately not imported: its init sets logrus, process-wide, to debug
	// level on stdout, which would print every inbound message.
	oa := officialaccount.NewOfficialAccount(&config.Config{
		AppID:          cfg.AppID,
		AppSecret:      cfg.AppSecret,
		Token:          cfg.Token,
		EncodingAESKey: cfg.EncodingAESKey,
		Cache:          cache.NewMemory(),
	})
	return &Channel{
		cfg: cfg,
		oa:  oa,
		api: &apiClient{
			base: base, appID: cfg.AppID, appSecret: cfg.AppSecret,
			http: cfg.HTTPClient, log: log, now: cfg.Now, backoff: 500 * time.Millisecond,
		},
		log:         log,
		now:         cfg.Now,
		replay:      cfg.Replay,
		bodies:      newRecentBodies(cfg.Now),
		typingEvery: 10 * time.Second,
		typingFor:   10 * time.Minute,
		handoffWait: 3 * time.Second,
	}, nil
}

// checkAESKey validates an EncodingAESKey: 43 base64 characters that decode to a 32-byte key.
func checkAESKey(k string) error {
	if len(k) != 43 {
		return fmt.Errorf("wechat: encoding_aes_key must be 43 characters, got %d", len(k))
	}
	// EncryptMsg decodes the key the same way the inbound side does; a throwaway encryption is the
	// SDK's own check of the key.
	if _, err := util.EncryptMsg(make([]byte, 16), nil, "x", k); err != nil {
		return fmt.Errorf("wechat: encoding_aes_key: %w", err)
	}
	return nil
}

// UseReplayGuard replaces the replay cache, e.g. with the store so that it survives a restart. Call
// it before Start.
func (c *Channel) UseReplayGuard(g ReplayGuard) {
	if g != nil {
		c.replay = g
	}
}

// Name returns "wechat".
func (c *Channel) Name() string { return Name }

// Limits: WeChat has no streaming, so the dispatcher never calls Update.
func (c *Channel) Limits() channels.Limits { return channels.Limits{UpdatesPerSecond: 0} }

// Start checks the credentials by fetching an access token and then lets the webhook deliver
// messages to h until ctx ends. It returns at once; the error says why the channel cannot run.
func (c *Channel) Start(ctx context.Context, h channels.Handler) error {
	if h == nil {
		return errors.New("wechat: start: nil handler")
	}
	if _, err := c.api.accessToken(ctx, ""); err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			c.log.Error("wechat: cannot get an access token", "errcode", ae.Code, "errmsg", ae.Msg)
			switch ae.Code {
			case 40013, 40125, 40001:
				return fmt.Errorf("wechat: start: app_id or app_secret rejected: %w", err)
			case 40164, 61004:
				return fmt.Errorf("wechat: start: this server's IP is not on the account's IP whitelist: %w", err)
			}
		}
		return fmt.Errorf("wechat: start: %w", err)
	}
	st := &startState{ctx: ctx, h: h}
	c.started.Store(st)
	if done := ctx.Done(); done != nil {
		go func() {
			<-done
			// Only this Start's state: a later Start (after a restart of the dispatcher) stays.
			c.started.CompareAndSwap(st, nil)
		}()
	}
	c.log.Info("wechat: webhook ready", "route", Route, "safe_mode", c.cfg.EncodingAESKey != "")
	return nil
}

// Routes mounts the webhook.
func (c *Channel) Routes() map[string]http.Handler {
	return map[string]http.Handler{Route: http.HandlerFunc(c.serveHTTP)}
}

// serveHTTP answers WeChat's URL check (GET with echostr) and message pushes (POST). Nobody but
// WeChat gets in: the signature must match, the timestamp must be within TimestampWindow of the
// server clock, a (timestamp, nonce) pair is accepted once (ReplayGuard), and with an
// encoding_aes_key only encrypted messages are taken. Every such refusal is the same 403 and starts
// nothing. An accepted message is handed to the dispatcher, then acknowledged with "success". In
// safe mode too: only a passive reply with content must be encrypted, while a plain "success" (or an
// empty body) just stops WeChat's retries (developer-community answer on message pushes; the SDK's
// encrypted empty payload is not documented anywhere).
func (c *Channel) serveHTTP(w http.ResponseWriter, r *http.Request) {
	st := c.started.Load()
	if st == nil {
		http.Error(w, "wechat channel not started", http.StatusServiceUnavailable)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		// Too slow (the gateway's read deadline) or cut off: nothing was checked, nothing starts.
		http.Error(w, "body unreadable", http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	ts, nonce := q.Get("timestamp"), q.Get("nonce")
	if !sameString(q.Get("signature"), util.Signature(c.cfg.Token, ts, nonce)) {
		c.reject(w, r, "signature mismatch")
		return
	}
	if !c.fresh(ts) {
		c.reject(w, r, "timestamp outside the accepted window", "timestamp", ts)
		return
	}
	if r.Method == http.MethodGet {
		if !q.Has("echostr") {
			http.Error(w, "missing echostr", http.StatusBadRequest)
			return
		}
		// The URL check is harmless to repeat (it only echoes), so it skips the replay cache.
		r.Body = io.NopCloser(bytes.NewReader(body))
		c.serveSDKRequest(w, r, st)
		return
	}
	safe := q.Get("encrypt_type") == "aes"
	if !safe && c.cfg.EncodingAESKey != "" {
		// A plaintext push is signed only over (token, timestamp, nonce), not over its body; with a
		// key configured the account is in safe mode and WeChat encrypts every push.
		c.reject(w, r, "plaintext message refused: encoding_aes_key is set, so only encrypted messages are accepted")
		return
	}
	if safe {
		if c.cfg.EncodingAESKey == "" {
			c.log.Error("wechat: safe-mode message but encoding_aes_key is not configured")
			http.Error(w, "safe mode not configured", http.StatusBadRequest)
			return
		}
		var env message.EncryptedXMLMsg
		if err := xml.Unmarshal(body, &env); err != nil || env.EncryptedMsg == "" {
			http.Error(w, "bad encrypted envelope", http.StatusBadRequest)
			return
		}
		want := util.Signature(c.cfg.Token, ts, nonce, env.EncryptedMsg)
		if !sameString(q.Get("msg_signature"), want) {
			c.reject(w, r, "msg_signature mismatch")
			return
		}
	}
	key := "wechat-replay:" + ts + ":" + nonce
	first, err := c.replay.MarkSeen(r.Context(), key, replayTTL)
	if err != nil {
		// Without the cache a replay cannot be told apart; WeChat retries a 503 a few seconds later.
		c.log.Error("wechat: replay cache unavailable; push refused for now", "err", err)
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	if !first {
		if c.bodies.same(key, body) {
			// WeChat's own resend of a request whose answer was slow: the message is with the
			// dispatcher already.
			c.log.Debug("wechat: identical resend acknowledged", "timestamp", ts)
			writeSuccess(w)
			return
		}
		c.reject(w, r, "replayed timestamp and nonce", "timestamp", ts)
		return
	}
	c.bodies.remember(key, body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	c.serveSDKRequest(w, r, st)
}

// reject answers a request that did not prove it comes from WeChat. The answer is the same whatever
// was wrong; the log says what.
func (c *Channel) reject(w http.ResponseWriter, r *http.Request, why string, attrs ...any) {
	c.log.Warn("wechat: webhook request rejected: "+why, append([]any{"remote", r.RemoteAddr}, attrs...)...)
	http.Error(w, "forbidden", http.StatusForbidden)
}

// fresh reports whether a push's timestamp (Unix seconds) is within TimestampWindow of the clock.
func (c *Channel) fresh(ts string) bool {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	d := c.now().Sub(time.Unix(sec, 0))
	return d <= TimestampWindow && d >= -TimestampWindow
}

func writeSuccess(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("success"))
}

// serveSDKRequest lets the SDK decrypt and parse a request whose origin is established, hands a
// message to the dispatcher and answers WeChat.
func (c *Channel) serveSDKRequest(w http.ResponseWriter, r *http.Request, st *startState) {
	rec := &bufferedWriter{header: w.Header()}
	srv := c.oa.GetServer(r, rec)
	var inbound *channels.Message
	srv.SetMessageHandler(func(m *message.MixMessage) *message.Reply {
		msg, reply := c.classify(m)
		inbound = msg
		return reply
	})
	if err := serveSDK(srv.Serve); err != nil {
		c.log.Warn("wechat: bad webhook request", "err", err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if srv.ResponseMsg != nil {
		// A passive reply (the notice for unsupported messages); Send encrypts it in safe mode.
		if err := serveSDK(srv.Send); err != nil {
			c.log.Warn("wechat: passive reply failed", "err", err)
			rec.reset()
		}
	}
	if inbound != nil {
		c.handOff(r.Context(), st, *inbound)
	}
	if rec.body.Len() == 0 {
		rec.header.Set("Content-Type", "text/plain; charset=utf-8")
		rec.body.WriteString("success")
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(rec.body.Bytes())
}

// handOff gives m to the dispatcher and waits for it to take the message (its dedup key is then
// durable) before WeChat gets the ack, but never longer than handoffWait: past 5 s WeChat re-sends,
// and the dispatcher answers some commands synchronously through the API.
func (c *Channel) handOff(reqCtx context.Context, st *startState, m channels.Message) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				c.log.Error("wechat: message handler panicked", "panic", p, "message_id", m.ID)
			}
		}()
		st.h.HandleMessage(st.ctx, m)
	}()
	t := time.NewTimer(c.handoffWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.log.Warn("wechat: handler still busy; acknowledging WeChat anyway", "message_id", m.ID, "waited", c.handoffWait)
	case <-reqCtx.Done():
	}
}

// serveSDK runs an SDK call that may panic (its Render panics on a write error).
func serveSDK(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("wechat sdk panic: %v", p)
		}
	}()
	return f()
}

// bufferedWriter collects what the SDK writes, so the answer reaches WeChat only after the message is
// with the dispatcher, and an SDK error never leaves half a response.
type bufferedWriter struct {
	header http.Header
	body   bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header         { return b.header }
func (b *bufferedWriter) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedWriter) WriteHeader(int)             {}
func (b *bufferedWriter) reset()                      { b.body.Reset() }

func sameString(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// classify turns a parsed push into a dispatcher message, or into a passive reply for what the
// channel does not handle. Events (subscribe, menu clicks, …) get neither.
func (c *Channel) classify(m *message.MixMessage) (*channels.Message, *message.Reply) {
	openID := string(m.FromUserName)
	var text string
	switch m.MsgType {
	case message.MsgTypeText:
		text = m.Content
	case message.MsgTypeVoice:
		// With speech recognition on, WeChat sends the transcript; treat it as the question.
		text = m.Recognition
		if strings.TrimSpace(text) == "" {
			return nil, unsupported()
		}
	case message.MsgTypeEvent:
		c.log.Debug("wechat: event ignored", "event", m.Event)
		return nil, nil
	default:
		return nil, unsupported()
	}
	text = strings.TrimSpace(text)
	if text == "" || openID == "" {
		return nil, nil
	}
	id := strconv.FormatInt(m.MsgID, 10)
	if m.MsgID == 0 {
		id = openID + ":" + strconv.FormatInt(m.CreateTime, 10)
	}
	return &channels.Message{
		Channel:        Name,
		ID:             id,
		ConversationID: openID,
		SenderID:       openID,
		SenderName:     senderName(openID),
		Text:           text,
		Ref:            openID,
	}, nil
}

// senderName labels a user without the user-info API (which needs another permission and call): the
// dispatcher uses it as the session title.
func senderName(openID string) string {
	if len(openID) > 6 {
		openID = openID[len(openID)-6:]
	}
	return "微信用户 " + openID
}

func unsupported() *message.Reply {
	return &message.Reply{MsgType: message.MsgTypeText, MsgData: message.NewText(UnsupportedNotice)}
}

// Reply opens the reply to m: a typing indicator, then the answer as customer-service messages.
func (c *Channel) Reply(ctx context.Context, m channels.Message) (channels.Reply, error) {
	openID := openIDOf(m)
	if openID == "" {
		return nil, errors.New("wechat: reply: message has no openid")
	}
	return &reply{c: c, openID: openID}, nil
}

// Send sends text to m's user as customer-service message(s), split at WeChat's limit.
func (c *Channel) Send(ctx context.Context, m channels.Message, text string) error {
	openID := openIDOf(m)
	if openID == "" {
		return errors.New("wechat: send: message has no openid")
	}
	return c.sendLong(ctx, openID, text)
}

func openIDOf(m channels.Message) string {
	if s, ok := m.Ref.(string); ok && s != "" {
		return s
	}
	return m.ConversationID
}

// sendLong splits and sends a text that is safe already (the gateway made it so). It stops at the first failed part: later parts would
// fail the same way (window closed) or arrive out of context.
func (c *Channel) sendLong(ctx context.Context, openID, text string) error {
	if strings.TrimSpace(text) == "" {
		text = "（没有可显示的回答）"
	}
	parts := splitText(text, maxPartBytes, maxParts)
	for i, p := range parts {
		if err := c.api.sendText(ctx, openID, p); err != nil {
			c.logSendError(err, i+1, len(parts))
			return fmt.Errorf("wechat: send part %d/%d: %w", i+1, len(parts), err)
		}
	}
	return nil
}

func (c *Channel) logSendError(err error, part, parts int) {
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.WindowClosed():
		c.log.Error("wechat: WeChat refused the customer-service message: the user must write to the account again (48-hour window / message quota)",
			"errcode", ae.Code, "errmsg", ae.Msg, "part", part, "parts", parts)
	case errors.As(err, &ae):
		c.log.Error("wechat: customer-service message failed", "errcode", ae.Code, "errmsg", ae.Msg, "part", part, "parts", parts)
	default:
		c.log.Error("wechat: customer-service message failed", "err", err, "part", part, "parts", parts)
	}
}

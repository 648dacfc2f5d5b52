package channels

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// Runner is the part of the agent the dispatcher drives; *agent.Agent satisfies it.
type Runner interface {
	Submit(ctx context.Context, t agent.Turn) (*agent.RunHandle, error)
	Cancel(sessionID string) bool
}

// Store is the persistence the dispatcher needs; *store.Store satisfies it.
type Store interface {
	MarkSeen(ctx context.Context, key string, ttl time.Duration) (bool, error)
	ConversationSession(ctx context.Context, key string) (string, error)
	BindConversation(ctx context.Context, key, sessionID string) error
	CreateSession(ctx context.Context, sess store.Session) (store.Session, error)
	LastMessageID(ctx context.Context, sessionID string) (uint64, error)
	CreateShare(ctx context.Context, sessionID, ownerID string, watermark uint64) (string, store.Share, error)
	GetMessage(ctx context.Context, id uint64) (store.Message, error)
}

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	Store Store
	Agent Runner
	// PublicURL is the gateway's external base URL; /share needs it.
	PublicURL string
	// SourcesFooter appends the verified sources (from the stored record) to final answers.
	SourcesFooter bool
	// DedupTTL is how long a platform message id is remembered; default 48h (platforms redeliver for
	// up to ~6h, and the issue asks for at least 24h).
	DedupTTL time.Duration
	Logger   *slog.Logger
}

// Dispatcher is the one inbound path from every chat channel into the agent.
type Dispatcher struct {
	cfg    DispatcherConfig
	log    *slog.Logger
	ctx    context.Context // lives as long as the dispatcher; replies outlive the inbound request
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// bindMu serialises creating and binding a conversation's session: webhook channels deliver
	// concurrently, and two first messages must not each create a session of their own.
	bindMu sync.Mutex
	// replyMu guards lastReply: per session, the done channel of the newest reply pump. Runs of a
	// session run one after the other; each pump waits for the previous one so that a slow delivery
	// of one answer is never overtaken by the next.
	replyMu   sync.Mutex
	lastReply map[string]chan struct{}
}

// NewDispatcher returns a dispatcher. Close it to stop in-flight replies.
func NewDispatcher(cfg DispatcherConfig) *Dispatcher {
	if cfg.DedupTTL <= 0 {
		cfg.DedupTTL = 48 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	ctx, cancel := context.WithCancel(context.Background())
	return &Dispatcher{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, lastReply: make(map[string]chan struct{})}
}

// Handler returns the Handler to pass to ch.Start.
func (d *Dispatcher) Handler(ch Channel) Handler { return channelHandler{d: d, ch: ch} }

// Wait blocks until every in-flight reply has finished or ctx ends.
func (d *Dispatcher) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops in-flight replies (their runs are cancelled by the agent's own shutdown) and waits.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.cancel()
	return d.Wait(ctx)
}

type channelHandler struct {
	d  *Dispatcher
	ch Channel
}

func (h channelHandler) HandleMessage(ctx context.Context, m Message) { h.d.handle(ctx, h.ch, m) }

// Chat commands.
const (
	cmdNew   = "/new"
	cmdStop  = "/stop"
	cmdShare = "/share"
)

func (d *Dispatcher) handle(ctx context.Context, ch Channel, m Message) {
	if m.Channel == "" {
		m.Channel = ch.Name()
	}
	log := d.log.With("channel", m.Channel, "message_id", m.ID, "conversation", m.ConversationID)
	if m.Group && !m.Mentioned {
		log.Debug("group message without mention ignored")
		return
	}
	if m.ID == "" || m.ConversationID == "" {
		log.Warn("inbound message without id or conversation ignored")
		return
	}
	// Record the platform id before anything runs: a redelivery (also after a restart) finds it.
	first, err := d.cfg.Store.MarkSeen(ctx, "msg:"+m.Channel+":"+m.ID, d.cfg.DedupTTL)
	if err != nil {
		log.Error("dedup store failed; message not processed", "err", err)
		d.notify(ch, m, "服务暂时不可用，请稍后再试。")
		return
	}
	if !first {
		log.Info("duplicate delivery ignored")
		return
	}
	text := strings.TrimSpace(m.Text)
	if text == "" {
		return
	}
	convKey := m.Channel + ":" + m.ConversationID
	switch strings.ToLower(strings.Fields(text)[0]) {
	case cmdNew:
		if _, err := d.newSession(ctx, convKey, m); err != nil {
			log.Error("new session failed", "err", err)
			d.notify(ch, m, "无法开始新会话，请稍后再试。")
			return
		}
		d.notify(ch, m, "已开始新的会话。")
		return
	case cmdStop:
		sid, err := d.cfg.Store.ConversationSession(ctx, convKey)
		if err == nil && d.cfg.Agent.Cancel(sid) {
			d.notify(ch, m, "已停止当前回答。")
		} else {
			d.notify(ch, m, "当前没有正在进行的回答。")
		}
		return
	case cmdShare:
		d.notify(ch, m, d.share(ctx, convKey, m, log))
		return
	}

	sid, err := d.sessionFor(ctx, convKey, m)
	if err != nil {
		log.Error("session lookup failed", "err", err)
		d.notify(ch, m, "服务暂时不可用，请稍后再试。")
		return
	}
	p := newPump(d, ch, m, log.With("session", sid))
	// Submit here, synchronously, so that messages of one conversation keep their arrival order; the
	// agent runs them one at a time. The pump is chained behind the session's previous one under the
	// same lock, so replies go out in run order.
	d.replyMu.Lock()
	h, err := d.cfg.Agent.Submit(ctx, agent.Turn{SessionID: sid, Text: text, Channel: m.Channel, Sink: p.push})
	if err != nil {
		d.replyMu.Unlock()
		log.Error("submit failed", "err", err)
		d.notify(ch, m, "无法处理这条消息："+err.Error())
		return
	}
	prev, done := d.lastReply[sid], make(chan struct{})
	d.lastReply[sid] = done
	d.replyMu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() {
			close(done)
			d.replyMu.Lock()
			if d.lastReply[sid] == done {
				delete(d.lastReply, sid)
			}
			d.replyMu.Unlock()
		}()
		defer func() {
			if r := recover(); r != nil {
				log.Error("reply pump panicked", "panic", r)
			}
		}()
		if prev != nil {
			select {
			case <-prev:
			case <-d.ctx.Done():
				return
			}
		}
		p.run(h)
	}()
}

func (d *Dispatcher) sessionFor(ctx context.Context, convKey string, m Message) (string, error) {
	sid, err := d.cfg.Store.ConversationSession(ctx, convKey)
	if err == nil {
		return sid, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	d.bindMu.Lock()
	defer d.bindMu.Unlock()
	// Another message of the conversation may have created it while this one waited.
	if sid, err := d.cfg.Store.ConversationSession(ctx, convKey); err == nil {
		return sid, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	return d.createSession(ctx, convKey, m)
}

// newSession starts a fresh session for the conversation (/new).
func (d *Dispatcher) newSession(ctx context.Context, convKey string, m Message) (string, error) {
	d.bindMu.Lock()
	defer d.bindMu.Unlock()
	return d.createSession(ctx, convKey, m)
}

// createSession creates a session and binds the conversation to it; the caller holds bindMu.
func (d *Dispatcher) createSession(ctx context.Context, convKey string, m Message) (string, error) {
	title := m.SenderName
	if m.Group {
		title = "群聊 " + m.ConversationID
	}
	sess, err := d.cfg.Store.CreateSession(ctx, store.Session{UserID: convKey, Channel: m.Channel, Title: title})
	if err != nil {
		return "", fmt.Errorf("create session: %w", err)
	}
	if err := d.cfg.Store.BindConversation(ctx, convKey, sess.ID); err != nil {
		return "", fmt.Errorf("bind conversation: %w", err)
	}
	return sess.ID, nil
}

func (d *Dispatcher) share(ctx context.Context, convKey string, m Message, log *slog.Logger) string {
	if d.cfg.PublicURL == "" {
		return "分享功能未启用：请为网关配置 --public-url。"
	}
	sid, err := d.cfg.Store.ConversationSession(ctx, convKey)
	if errors.Is(err, store.ErrNotFound) {
		return "当前会话还没有内容可分享。"
	}
	if err != nil {
		log.Error("share: session lookup failed", "err", err)
		return "分享失败，请稍后再试。"
	}
	wm, err := d.cfg.Store.LastMessageID(ctx, sid)
	if err != nil || wm == 0 {
		return "当前会话还没有内容可分享。"
	}
	token, _, err := d.cfg.Store.CreateShare(ctx, sid, convKey, wm)
	if err != nil {
		log.Error("share: create failed", "err", err)
		return "分享失败，请稍后再试。"
	}
	return "只读分享链接（含到目前为止的对话）：" + d.cfg.PublicURL + "/s/" + token
}

// notify sends a one-off notice without holding up the platform's ack.
func (d *Dispatcher) notify(ch Channel, m Message, text string) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() {
			if r := recover(); r != nil {
				d.log.Error("channel send panicked", "channel", ch.Name(), "panic", r)
			}
		}()
		d.send(ch, m, text)
	}()
}

// send delivers a one-off notice; it always goes through Strip like every outbound text.
func (d *Dispatcher) send(ch Channel, m Message, text string) {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	if err := ch.Send(ctx, m, citations.Strip(text)); err != nil {
		d.log.Warn("channel send failed", "channel", ch.Name(), "err", err)
	}
}

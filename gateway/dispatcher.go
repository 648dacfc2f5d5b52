package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/store"
)

// DispatchAgent is the part of the agent the dispatcher drives; *agent.Agent satisfies it.
type DispatchAgent interface {
	Submit(ctx context.Context, t agent.Turn) (*agent.RunHandle, error)
	Cancel(sessionID string) bool
}

// DispatchStore is the persistence the dispatcher needs; any store.Backend satisfies it.
type DispatchStore interface {
	// AcceptInbound takes a message in one trip: dedup, the conversation's session (created and
	// bound when missing) and the user's turn queued as a stored USER message and run.
	AcceptInbound(ctx context.Context, in store.Inbound) (store.Accepted, error)
	UnmarkSeen(ctx context.Context, key string) error
	ConcludeRun(ctx context.Context, c store.Conclusion) (store.Run, store.Message, error)
	LastMessageID(ctx context.Context, sessionID string) (uint64, error)
	ShareSession(ctx context.Context, sessionID, ownerID string, watermark uint64) (string, store.Share, bool, error)
	GetMessage(ctx context.Context, id uint64) (store.Message, error)
}

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	Store DispatchStore
	Agent DispatchAgent
	// PublicURL is the gateway's external base URL for /share links. Empty (the operator did not
	// set --public-url) makes /share explain that sharing needs it, rather than hand a chat user a
	// link to a loopback address.
	PublicURL string
	// SourcesFooter appends the verified sources (from the stored record) to final answers.
	SourcesFooter bool
	// DedupTTL is how long a platform message id is remembered; default 48h (platforms redeliver for
	// up to ~6h, and DESIGN §6 asks for at least 24h).
	DedupTTL time.Duration
	// TurnDone, when set, is told the session of each chat turn that is over for its conversation:
	// its answer (or failure) handed to the platform, the notice of a turn the agent refused, or the
	// notice of a run a lease reaper interrupted (RunInterrupted). Several replicas set it to
	// TurnOrder.RunEnded, so that the session's next turn starts after this answer reached the chat.
	// Called from reply goroutines; it must not block.
	TurnDone func(sessionID string)
	// Registerer receives citegate_links_hidden_total; nil keeps the counter unregistered.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Dispatcher is the one inbound path from every chat channel into the agent, and the one place
// where answer text is made safe for a channel (outbound.go): dedup by platform message id,
// session per conversation, chat commands, and per-conversation reply queues.
type Dispatcher struct {
	cfg         DispatcherConfig
	log         *slog.Logger
	ctx         context.Context // lives as long as the dispatcher; replies outlive the inbound request
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	linksHidden *prometheus.CounterVec
	// stopping is set when the server shuts down: runs cancelled from then on end their replies
	// with the restart notice instead of the /stop one.
	stopping atomic.Bool
	// convs serialises the inbound messages of one conversation from their store trip to their
	// Submit, so that the order of the stored turns is the order of the runs. Conversations do not
	// wait for each other.
	convs keyedMutex
	// qMu guards last: per conversation, the done channel of the newest reply job (an answer's
	// reply pump or a notice). Each job waits for the previous one, so a conversation's answers and
	// notices reach the platform in the order they were queued; qMu is held across Submit so that
	// this order is also the order of the runs.
	qMu  sync.Mutex
	last map[string]chan struct{}
}

// NewDispatcher returns a dispatcher. Shut it down with Close.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.Store == nil || cfg.Agent == nil {
		return nil, errors.New("gateway: dispatcher: Store and Agent are required")
	}
	if cfg.Logger == nil {
		return nil, errors.New("gateway: dispatcher: Logger is required")
	}
	if cfg.DedupTTL <= 0 {
		cfg.DedupTTL = 48 * time.Hour
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	lh, err := linksHiddenCounter(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Dispatcher{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, linksHidden: lh, last: make(map[string]chan struct{})}, nil
}

// Handler returns the Handler to pass to ch.Start.
func (d *Dispatcher) Handler(ch channels.Channel) channels.Handler {
	return channelHandler{d: d, ch: ch}
}

// Wait blocks until every queued reply and notice has been delivered or ctx ends.
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

// Stopping marks the start of a shutdown: replies of runs cancelled from now on say that the
// server is restarting. Call it before the agent cancels its runs.
func (d *Dispatcher) Stopping() { d.stopping.Store(true) }

// Close waits (bounded by ctx) for queued replies to be delivered — after the agent has closed,
// each ends with its terminal text — and then cancels whatever is still in flight.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.Stopping()
	err := d.Wait(ctx)
	d.cancel()
	if err != nil {
		return fmt.Errorf("gateway: dispatcher: replies still in flight: %w", err)
	}
	return nil
}

type channelHandler struct {
	d  *Dispatcher
	ch channels.Channel
}

func (h channelHandler) HandleMessage(ctx context.Context, m channels.Message) {
	h.d.handle(ctx, h.ch, m)
}

// Chat commands.
const (
	cmdNew   = "/new"
	cmdStop  = "/stop"
	cmdShare = "/share"
)

// User-facing notices: plain words, never an internal error text (those go to the log).
const (
	noticeUnavailable = "服务暂时不可用，请稍后再试。"
	noticeNewSession  = "已开始新的会话。"
	noticeNewFailed   = "无法开始新会话，请稍后再试。"
	noticeStopped     = "已停止当前回答。"
	noticeNothingRuns = "当前没有正在进行的回答。"
	noticeQueueFull   = "这个会话里等待回答的消息太多了，请等当前回答结束后再发送。"
	noticeRestarting  = "服务正在重启，请稍后重新发送这条消息。"
	noticeNotHandled  = "暂时无法处理这条消息，请稍后再试。"
	noticeBadMessage  = "这条消息无法处理（内容为空或过长）。"
	noticeNoShareURL  = "分享功能需要网关配置对外地址（--public-url / CITEGATE_PUBLIC_URL），请联系管理员。"
	noticeNothingYet  = "当前会话还没有内容可分享。"
	noticeShareFailed = "分享失败，请稍后再试。"
)

func (d *Dispatcher) handle(ctx context.Context, ch channels.Channel, m channels.Message) {
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
	convKey := m.Channel + ":" + m.ConversationID
	text := strings.TrimSpace(m.Text)
	if text == "" {
		return
	}
	title := m.SenderName
	if m.Group {
		title = "群聊 " + m.ConversationID
	}
	// One store trip records the platform id (a redelivery, also after a restart, finds it),
	// resolves the conversation's session and, for a question, stores the user's turn: either all
	// of it or none of it, so no message is ever marked seen without being queued.
	in := store.Inbound{
		SeenKey:      "msg:" + m.Channel + ":" + m.ID,
		SeenTTL:      d.cfg.DedupTTL,
		Conversation: convKey,
		Create:       &store.Session{UserID: convKey, Channel: m.Channel, Title: title},
	}
	cmd := strings.ToLower(strings.Fields(text)[0])
	switch cmd {
	case cmdNew:
		in.Fresh = true
	case cmdStop, cmdShare:
		in.Create = nil // a command never creates a session
	default:
		if len(text) > agent.MaxTurnBytes {
			// Refused before it is stored: a message the agent cannot take is not kept either.
			log.Warn("message too long", "bytes", len(text))
			d.notice(ch, m, convKey, noticeBadMessage)
			return
		}
		in.Turn = &store.InboundTurn{Channel: m.Channel, Text: text, Origin: originOf(m)}
	}
	unlock := d.convs.lock(convKey)
	defer unlock()
	acc, err := d.cfg.Store.AcceptInbound(ctx, in)
	if err != nil {
		log.Error("accepting the message failed; not processed", "err", err)
		d.notice(ch, m, convKey, noticeUnavailable)
		return
	}
	if acc.Duplicate {
		log.Info("duplicate delivery ignored")
		return
	}
	switch cmd {
	case cmdNew:
		d.notice(ch, m, convKey, noticeNewSession)
		return
	case cmdStop:
		// The notice is queued behind the answer being stopped, so it arrives after the
		// answer's own "stopped" ending.
		if acc.SessionID != "" && d.cfg.Agent.Cancel(acc.SessionID) {
			d.notice(ch, m, convKey, noticeStopped)
		} else {
			d.notice(ch, m, convKey, noticeNothingRuns)
		}
		return
	case cmdShare:
		d.notice(ch, m, convKey, d.share(ctx, acc.SessionID, convKey, log))
		return
	}

	sid := acc.SessionID
	p := newPump(d, ch, m, log.With("session", sid, "run", acc.Run.ID))
	// Submit here, synchronously and under the conversation's lock, so that the runs of a
	// conversation run in the order their turns were stored; the reply is queued behind the
	// conversation's previous job under qMu.
	d.qMu.Lock()
	h, err := d.cfg.Agent.Submit(ctx, agent.Turn{
		SessionID: sid, Text: text, Channel: m.Channel, Sink: p.push,
		RunID: acc.Run.ID, UserMessageID: acc.UserMessage.ID,
	})
	if err != nil {
		d.qMu.Unlock()
		log.Error("submit failed", "err", err)
		notice := submitNotice(err)
		d.abandon(ctx, in.SeenKey, acc.Run.ID, notice, log)
		d.notice(ch, m, convKey, notice)
		d.queue(convKey, func(context.Context) { d.turnDone(sid) })
		return
	}
	d.queueLocked(convKey, func(ctx context.Context) {
		defer d.turnDone(sid)
		p.run(ctx, h)
	})
	d.qMu.Unlock()
}

// turnDone tells DispatcherConfig.TurnDone that a turn of the session is over for its chat.
func (d *Dispatcher) turnDone(sessionID string) {
	if d.cfg.TurnDone != nil {
		d.cfg.TurnDone(sessionID)
	}
}

// abandon ends a stored turn the agent did not take: its run is recorded FAILED with the reason the
// user is told, and the message id is forgotten so that the platform's redelivery is processed
// instead of being dropped as a duplicate.
func (d *Dispatcher) abandon(ctx context.Context, seenKey, runID, reason string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, _, err := d.cfg.Store.ConcludeRun(ctx, store.Conclusion{RunID: runID, Phase: store.PhaseFailed, Error: reason}); err != nil {
		log.Error("could not record the refused turn as failed", "err", err)
	}
	if err := d.cfg.Store.UnmarkSeen(ctx, seenKey); err != nil {
		log.Error("could not forget the message id; a redelivery will be ignored", "err", err)
	}
}

// ownLink allows the gateway's own public links (share links) in notices.
func (d *Dispatcher) ownLink(u string) bool {
	return d.cfg.PublicURL != "" && strings.HasPrefix(u, d.cfg.PublicURL+"/")
}

// submitNotice says in plain words why a message was not taken.
func submitNotice(err error) string {
	switch {
	case errors.Is(err, agent.ErrQueueFull):
		return noticeQueueFull
	case errors.Is(err, agent.ErrClosed):
		return noticeRestarting
	case errors.Is(err, agent.ErrBadTurn):
		return noticeBadMessage
	}
	return noticeNotHandled
}

// queue appends a job to the conversation's reply queue.
func (d *Dispatcher) queue(convKey string, job func(ctx context.Context)) {
	d.qMu.Lock()
	defer d.qMu.Unlock()
	d.queueLocked(convKey, job)
}

// queueLocked appends a job to the conversation's reply queue; the caller holds qMu. The job runs
// in a goroutine of its own once the previous job of the conversation is done.
func (d *Dispatcher) queueLocked(convKey string, job func(ctx context.Context)) {
	prev, done := d.last[convKey], make(chan struct{})
	d.last[convKey] = done
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() {
			close(done)
			d.qMu.Lock()
			if d.last[convKey] == done {
				delete(d.last, convKey)
			}
			d.qMu.Unlock()
		}()
		defer func() {
			if r := recover(); r != nil {
				d.log.Error("reply job panicked", "conversation", convKey, "panic", fmt.Sprint(r))
			}
		}()
		if prev != nil {
			select {
			case <-prev:
			case <-d.ctx.Done():
				return
			}
		}
		job(d.ctx)
	}()
}

// share creates a read-only link to the conversation's session sid ("" when it has none).
func (d *Dispatcher) share(ctx context.Context, sid, convKey string, log *slog.Logger) string {
	if d.cfg.PublicURL == "" {
		return noticeNoShareURL
	}
	if sid == "" {
		return noticeNothingYet
	}
	wm, err := d.cfg.Store.LastMessageID(ctx, sid)
	if err != nil || wm == 0 {
		return noticeNothingYet
	}
	token, _, _, err := d.cfg.Store.ShareSession(ctx, sid, convKey, wm)
	if err != nil {
		log.Error("share: create failed", "err", err)
		return noticeShareFailed
	}
	return "只读分享链接（含到目前为止的对话）：" + d.cfg.PublicURL + "/s/" + token
}

// notice queues a one-off text behind the conversation's earlier replies, without holding up the
// platform's ack.
func (d *Dispatcher) notice(ch channels.Channel, m channels.Message, convKey, text string) {
	d.queue(convKey, func(ctx context.Context) { d.send(ctx, ch, m, text) })
}

// send delivers a plain text; like every outbound text it is made safe first (no marker, no
// unverified link: a notice allows none).
func (d *Dispatcher) send(ctx context.Context, ch channels.Channel, m channels.Message, text string) {
	safe, _ := safeFinal(text, d.ownLink)
	d.sendSafe(ctx, ch, m, safe)
}

// sendSafe delivers a text that is already safe.
func (d *Dispatcher) sendSafe(ctx context.Context, ch channels.Channel, m channels.Message, text string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ch.Send(ctx, m, text); err != nil {
		d.log.Warn("channel send failed", "channel", ch.Name(), "err", err)
	}
}

// keyedMutex is a mutex per key, held only while in use.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks key and returns its unlock.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*keyedLock)
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

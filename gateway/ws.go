package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/citations/markdown"
	"github.com/citegate/citegate/store"
)

const (
	writeWait = 10 * time.Second
	// defaultPongWait is how long a connection may stay silent (no frame, no pong) before it is
	// closed; pings go out at half of it, leaving a whole half for the pong to arrive.
	defaultPongWait = 60 * time.Second
	// maxFrameBytes admits a chat.send at the text limit however its JSON is encoded: an escaped
	// character (\uXXXX) is 6 bytes for at most 1 byte of text; 4 KiB is for the other fields.
	maxFrameBytes = 6*maxTextBytes + 4<<10
	// A client whose queue grows past these limits is too slow to follow its runs and is dropped;
	// the queue itself only holds memory while frames are pending, so idle clients cost little.
	maxQueuedFrames = 4096
	maxQueuedBytes  = 4 << 20
	// maxTextBytes mirrors the agent's limit so the user gets the error before a session is created.
	maxTextBytes = 32 << 10
	titleRunes   = 40
)

// upgrader: read buffer small (frames are small), write buffers pooled so an idle connection holds
// none. The Origin check is done before Upgrade (it depends on how the client authenticated).
var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 4096,
	WriteBufferPool: &sync.Pool{},
	CheckOrigin:     func(*http.Request) bool { return true },
}

// wsFrame is every server → client frame. Fields that do not concern a type stay empty.
type wsFrame struct {
	Type          string               `json:"type"`
	SessionID     string               `json:"sessionId,omitempty"`
	RunID         string               `json:"runId,omitempty"`
	ClientMsgID   string               `json:"clientMsgId,omitempty"`
	UserMessageID uint64               `json:"userMessageId,omitempty"`
	Model         string               `json:"model,omitempty"`
	CallID        string               `json:"callId,omitempty"`
	Tool          string               `json:"tool,omitempty"`
	Arguments     string               `json:"arguments,omitempty"`
	OK            *bool                `json:"ok,omitempty"`
	Text          string               `json:"text,omitempty"`
	MessageID     uint64               `json:"messageId,omitempty"`
	Content       *string              `json:"content,omitempty"`
	HTML          *string              `json:"html,omitempty"`
	Citations     []citations.Citation `json:"citations,omitempty"`
	Phase         store.Phase          `json:"phase,omitempty"`
	Error         string               `json:"error,omitempty"`
	Code          string               `json:"code,omitempty"`
	Message       string               `json:"message,omitempty"`
	Session       *sessionJSON         `json:"session,omitempty"`
	Messages      *[]messageJSON       `json:"messages,omitempty"`
}

// clientFrame is every client → server frame.
type clientFrame struct {
	Type        string `json:"type"`
	SessionID   string `json:"sessionId"`
	Text        string `json:"text"`
	ClientMsgID string `json:"clientMsgId"`
}

type outFrame struct {
	data []byte
	at   time.Time // answer.delta: when the event happened, for the latency histogram
	// raw: data is the unsent rest of a frame the direct path began; it goes to the socket as is.
	raw bool
}

// client is one websocket connection. Frames reach the socket two ways: the write pump drains the
// queue, and a delta produced while the queue is empty and nobody is writing is written straight
// from the run's goroutine with one non-blocking write (see tryDirect). wmu orders the two.
type client struct {
	s    *Server
	conn *websocket.Conn
	user store.User
	lang string
	// raw makes one non-blocking write to the socket; nil when the connection has no socket.
	raw func(p []byte) (int, error)

	// wmu is held by whoever writes to conn (pump, direct path, control frames). Lock order: wmu,
	// then mu; the direct path only ever TryLocks wmu while holding mu.
	wmu    sync.Mutex
	mu     sync.Mutex
	queue  []outFrame
	qBytes int
	closed bool

	notify chan struct{} // capacity 1: "the queue is not empty"
	done   chan struct{} // closed once by close()
	once   sync.Once
}

func (c *client) close() { c.once.Do(func() { close(c.done) }) }

// enqueue hands a frame to the connection without blocking; a client that cannot keep up is
// dropped. It reports whether the frame was queued for the write pump (false: written already,
// or dropped).
func (c *client) enqueue(f outFrame) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	size := len(f.data)
	if size > maxQueuedBytes && len(c.queue) == 0 {
		// One frame larger than the whole budget (the history of a long session) is not frames
		// piling up behind a slow client: admit it alone, uncharged. A second one while it waits is
		// charged in full, so at most one such frame is held.
		size = 0
	}
	if len(c.queue) >= maxQueuedFrames || c.qBytes+size > maxQueuedBytes {
		c.closed = true
		c.queue, c.qBytes = nil, 0
		c.mu.Unlock()
		c.s.m.wsDropped.Inc()
		c.s.log.Warn("websocket client too slow, dropping it", "user", c.user.ID)
		c.close()
		return false
	}
	// Deltas are small and latency-bound: when nothing is queued and nobody is writing, write the
	// frame now instead of waking the pump (one goroutine hand-off less on the hot path).
	if !f.at.IsZero() && len(f.data) <= maxDirectBytes && len(c.queue) == 0 && c.raw != nil && c.wmu.TryLock() {
		c.mu.Unlock()
		return c.tryDirect(f)
	}
	c.queue = append(c.queue, f)
	c.qBytes += size
	c.mu.Unlock()
	c.wake()
	return true
}

func (c *client) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// maxDirectBytes bounds the payloads the direct path writes, so its one write stays small; larger
// frames go through the pump.
const maxDirectBytes = 1024

// tryDirect is called with wmu held and the queue empty. It writes f as one websocket text frame
// with a single non-blocking write; whatever the socket does not take (all of it when the socket
// buffer is full, the tail on a short write) goes to the front of the queue for the pump, so a
// slow client never blocks the caller and frames keep their order.
//
// One gap remains: gorilla itself writes a close frame from the read goroutine, outside wmu, when
// the client breaks the protocol or exceeds the read limit; should that coincide with a short
// direct write, the close frame lands inside the cut frame. The connection is being closed then
// anyway.
func (c *client) tryDirect(f outFrame) bool {
	frame := appendFrame(make([]byte, 0, len(f.data)+4), f.data)
	// The last deadline gorilla put on the socket may have passed on an idle connection (gorilla's
	// own SetWriteDeadline only applies to its next write); this write cannot block, so clear it.
	_ = c.conn.NetConn().SetWriteDeadline(time.Time{})
	n, err := c.raw(frame)
	if err != nil {
		c.wmu.Unlock()
		c.close()
		return false
	}
	if n == len(frame) {
		c.wmu.Unlock()
		c.s.m.deltaLatency.Observe(time.Since(f.at).Seconds())
		return false
	}
	rest := outFrame{data: f.data, at: f.at}
	if n > 0 {
		rest = outFrame{data: frame[n:], at: f.at, raw: true}
	}
	// Still holding wmu: the pump cannot have taken a batch since the queue was seen empty, so
	// anything queued meanwhile came after this frame.
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.wmu.Unlock()
		return false
	}
	c.queue = append(c.queue, outFrame{})
	copy(c.queue[1:], c.queue)
	c.queue[0] = rest
	c.qBytes += len(rest.data)
	c.mu.Unlock()
	c.wmu.Unlock()
	c.wake()
	return true
}

// appendFrame appends data as one unmasked, final websocket text frame (RFC 6455 §5.2; server
// frames are never masked).
func appendFrame(dst, data []byte) []byte {
	n := len(data)
	dst = append(dst, 0x81) // FIN, opcode text
	switch {
	case n < 126:
		dst = append(dst, byte(n))
	case n <= 0xFFFF:
		dst = append(dst, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, data...)
}

// writeControl sends a control frame under wmu, so it never lands inside a frame being written.
// The rest of a frame the direct path cut short may be waiting at the front of the queue: it is
// written first, or the control frame would land inside that frame.
func (c *client) writeControl(messageType int, data []byte, deadline time.Time) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var rest outFrame
	c.mu.Lock()
	if len(c.queue) > 0 && c.queue[0].raw {
		rest = c.queue[0]
		c.queue[0] = outFrame{}
		c.queue = c.queue[1:]
		c.qBytes -= len(rest.data)
	}
	c.mu.Unlock()
	if rest.raw {
		nc := c.conn.NetConn()
		_ = nc.SetWriteDeadline(deadline)
		if _, err := nc.Write(rest.data); err != nil {
			return err
		}
		if !rest.at.IsZero() {
			c.s.m.deltaLatency.Observe(time.Since(rest.at).Seconds())
		}
	}
	return c.conn.WriteControl(messageType, data, deadline)
}

func (c *client) send(v *wsFrame) {
	data, err := json.Marshal(v)
	if err != nil {
		c.s.log.Error("encode websocket frame", "type", v.Type, "err", err)
		return
	}
	c.enqueue(outFrame{data: data})
}

func (c *client) sendError(code, msg, sessionID, clientMsgID string) {
	c.send(&wsFrame{Type: "error", Code: code, Message: msg, SessionID: sessionID, ClientMsgID: clientMsgID})
}

func (c *client) writePump() {
	ticker := time.NewTicker(c.s.pongWait / 2)
	defer func() {
		ticker.Stop()
		_ = c.conn.Close()
	}()
	var batch []outFrame
	for {
		select {
		case <-c.notify:
			// wmu before taking the batch: a direct write in progress finishes (or queues its
			// rest at the front) before these frames go out.
			c.wmu.Lock()
			c.mu.Lock()
			batch, c.queue = c.queue, batch[:0]
			c.qBytes = 0
			c.mu.Unlock()
			ok := c.writeBatch(batch)
			c.wmu.Unlock()
			if !ok {
				c.close()
				return
			}
			clear(batch)
			if cap(batch) > 256 {
				batch = nil // a burst is over; do not keep its memory on an idle client
			}
		case <-ticker.C:
			if err := c.writeControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				c.close()
				return
			}
		case <-c.done:
			_ = c.writeControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseGoingAway, "server closing connection"), time.Now().Add(time.Second))
			return
		}
	}
}

// writeBatch writes queued frames in order; the caller holds wmu.
func (c *client) writeBatch(batch []outFrame) bool {
	for _, f := range batch {
		_ = c.conn.SetWriteDeadline(time.Now().Add(writeWait))
		var err error
		if f.raw {
			// Straight to the socket, so the deadline too (gorilla's applies to its writes only).
			nc := c.conn.NetConn()
			_ = nc.SetWriteDeadline(time.Now().Add(writeWait))
			_, err = nc.Write(f.data)
		} else {
			err = c.conn.WriteMessage(websocket.TextMessage, f.data)
		}
		if err != nil {
			return false
		}
		if !f.at.IsZero() {
			c.s.m.deltaLatency.Observe(time.Since(f.at).Seconds())
		}
	}
	return true
}

func (c *client) readPump(ctx context.Context) {
	c.conn.SetReadLimit(maxFrameBytes)
	// gorilla answers pings and close frames from this goroutine; route those writes through wmu
	// like every other write (same replies as gorilla's default handlers).
	c.conn.SetPingHandler(func(data string) error {
		err := c.writeControl(websocket.PongMessage, []byte(data), time.Now().Add(writeWait))
		var ne net.Error
		if errors.Is(err, websocket.ErrCloseSent) || (errors.As(err, &ne) && ne.Timeout()) {
			return nil
		}
		return err
	})
	c.conn.SetCloseHandler(func(code int, _ string) error {
		_ = c.writeControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(writeWait))
		return nil
	})
	_ = c.conn.SetReadDeadline(time.Now().Add(c.s.pongWait))
	c.conn.SetPongHandler(func(string) error { return c.conn.SetReadDeadline(time.Now().Add(c.s.pongWait)) })
	for {
		mt, data, err := c.conn.ReadMessage()
		if err != nil {
			return
		}
		_ = c.conn.SetReadDeadline(time.Now().Add(c.s.pongWait))
		if mt != websocket.TextMessage {
			c.sendError(CodeBadRequest, "frames must be JSON text", "", "")
			continue
		}
		c.handle(ctx, data)
	}
}

// handle processes one client frame. Whatever is wrong with it, the answer is an error frame and
// the connection stays up.
func (c *client) handle(ctx context.Context, data []byte) {
	var f clientFrame
	if err := json.Unmarshal(data, &f); err != nil {
		c.sendError(CodeBadRequest, "frame is not a JSON object: "+err.Error(), "", "")
		return
	}
	switch f.Type {
	case "chat.send":
		c.chatSend(ctx, f)
	case "chat.cancel":
		if f.SessionID == "" {
			c.sendError(CodeBadRequest, "chat.cancel needs sessionId", "", f.ClientMsgID)
			return
		}
		if !c.owns(ctx, f.SessionID) {
			c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
			return
		}
		if !c.s.ag.Cancel(f.SessionID) {
			c.sendError(CodeBadRequest, "no run is in progress in this session", f.SessionID, f.ClientMsgID)
		}
	case "session.open":
		if f.SessionID == "" {
			c.sendError(CodeBadRequest, "session.open needs sessionId", "", f.ClientMsgID)
			return
		}
		c.sessionOpen(ctx, f)
	case "":
		c.sendError(CodeBadRequest, "frame has no type", "", f.ClientMsgID)
	default:
		c.sendError(CodeBadRequest, "unknown frame type "+quoteShort(f.Type), "", f.ClientMsgID)
	}
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40]
	}
	b, _ := json.Marshal(strings.ToValidUTF8(s, "?"))
	return string(b)
}

// owns checks that the session exists and is the client's; store errors count as not owned.
func (c *client) owns(ctx context.Context, sessionID string) bool {
	if len(sessionID) > 128 {
		return false
	}
	if owner, ok := c.s.hub.cachedOwner(sessionID); ok {
		return owner == c.user.ID
	}
	sess, err := c.s.st.GetSession(ctx, sessionID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			c.s.storeErr("get_session", err)
		}
		return false
	}
	c.s.hub.setOwner(sess.ID, sess.UserID)
	return sess.UserID == c.user.ID
}

func (c *client) chatSend(ctx context.Context, f clientFrame) {
	text := strings.TrimSpace(f.Text)
	switch {
	case text == "":
		c.sendError(CodeBadRequest, "chat.send needs a non-empty text", f.SessionID, f.ClientMsgID)
		return
	case len(text) > maxTextBytes:
		c.sendError(CodeBadRequest, "the message is too long (at most 32 KiB)", f.SessionID, f.ClientMsgID)
		return
	case !utf8.ValidString(text):
		c.sendError(CodeBadRequest, "the message is not valid UTF-8", f.SessionID, f.ClientMsgID)
		return
	}
	if f.SessionID != "" && !c.owns(ctx, f.SessionID) {
		c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
		return
	}
	if !c.s.limiter(c.user.ID).Allow() {
		msg := "too many messages: at most " + itoa(c.s.cfg.ChatRatePerMinute) + " per minute; wait a moment and send again"
		if c.lang != "en" {
			msg = "发送过于频繁：每分钟最多 " + itoa(c.s.cfg.ChatRatePerMinute) + " 条，请稍后再试。"
		}
		c.sendError(CodeRateLimited, msg, f.SessionID, f.ClientMsgID)
		return
	}
	sessionID := f.SessionID
	if sessionID == "" {
		sess, err := c.s.st.CreateSession(ctx, store.Session{UserID: c.user.ID, Channel: "desktop", Title: titleOf(text)})
		if err != nil {
			c.s.storeErr("create_session", err)
			c.sendError(CodeInternal, "could not create the session", "", f.ClientMsgID)
			return
		}
		c.s.hub.setOwner(sess.ID, sess.UserID)
		sessionID = sess.ID
		sj := toSessionJSON(sess)
		// Every tab of the user learns about the new session; the sender matches it by clientMsgId.
		c.s.hub.toUser(c.user.ID, &wsFrame{Type: "session.created", SessionID: sess.ID, ClientMsgID: f.ClientMsgID, Session: &sj})
	}
	subCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.s.ag.Submit(subCtx, agent.Turn{SessionID: sessionID, Text: text, Channel: "desktop"}); err != nil {
		c.s.log.Warn("submit turn", "session", sessionID, "err", err)
		code := CodeBadRequest
		switch {
		case errors.Is(err, agent.ErrQueueFull):
			code = CodeRateLimited
		case errors.Is(err, agent.ErrClosed), ctx.Err() != nil, subCtx.Err() != nil:
			code = CodeUnavailable
		}
		c.sendError(code, "could not start the run: "+err.Error(), sessionID, f.ClientMsgID)
	}
}

func (c *client) sessionOpen(ctx context.Context, f clientFrame) {
	if !c.owns(ctx, f.SessionID) {
		c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
		return
	}
	all, err := c.s.st.ListMessages(ctx, f.SessionID)
	if err != nil {
		c.s.storeErr("list_messages", err)
		c.sendError(CodeInternal, "could not load the session", f.SessionID, f.ClientMsgID)
		return
	}
	msgs := make([]messageJSON, 0, len(all))
	for _, m := range all {
		if visible(m) {
			msgs = append(msgs, toMessageJSON(m, c.lang))
		}
	}
	c.send(&wsFrame{Type: "session.history", SessionID: f.SessionID, ClientMsgID: f.ClientMsgID, Messages: &msgs})
}

// titleOf is the first ~40 runes of the first line of text.
func titleOf(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	line = strings.Join(strings.Fields(line), " ")
	if r := []rune(line); len(r) > titleRunes {
		return string(r[:titleRunes]) + "…"
	}
	return line
}

func itoa(n int) string { return strconv.Itoa(n) }

// handleWS authenticates and upgrades. Cookie-authenticated upgrades must come from our own origin
// (browsers attach cookies to cross-site websocket requests); Bearer clients are not browsers.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	u, fromCookie, err := s.authenticate(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if fromCookie && !s.originAllowed(r) {
		s.writeError(w, r, &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: "websocket origin not allowed"})
		return
	}
	if s.hub.isClosed() {
		s.writeError(w, r, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "server is shutting down"})
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered the client already
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	c := &client{s: s, conn: conn, raw: rawWriter(conn.NetConn()), user: u, lang: langOf(r), notify: make(chan struct{}, 1), done: make(chan struct{})}
	if !s.hub.register(c) {
		_ = conn.Close()
		return
	}
	defer s.hub.unregister(c)
	go func() {
		defer s.recoverGo("websocket write pump")
		c.writePump()
	}()
	func() {
		defer s.recoverGo("websocket read pump")
		c.readPump(ctx)
	}()
	c.close()
}

func (s *Server) recoverGo(what string) {
	if v := recover(); v != nil {
		s.log.Error("recovered panic", "in", what, "panic", v)
	}
}

// runState remembers what a run's later frames need: the final content (the citations frame
// re-renders it) and the number of verified citations (a metric observed at run.finished).
type runState struct {
	content   string
	messageID uint64
	cits      int
}

// hub routes agent events to the websocket clients of the session's owner.
type hub struct {
	s *Server

	mu     sync.RWMutex
	users  map[string]map[*client]struct{}
	count  int
	closed bool
	wg     sync.WaitGroup

	ownMu  sync.RWMutex
	owners map[string]string // session id → user id (sessions never change owner)

	runMu sync.Mutex
	runs  map[string]*runState
}

func newHub(s *Server) *hub {
	return &hub{s: s, users: make(map[string]map[*client]struct{}), owners: make(map[string]string), runs: make(map[string]*runState)}
}

func (h *hub) register(c *client) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	set := h.users[c.user.ID]
	if set == nil {
		set = make(map[*client]struct{})
		h.users[c.user.ID] = set
	}
	set[c] = struct{}{}
	h.count++
	h.wg.Add(1)
	h.s.m.wsClients.Inc()
	return true
}

func (h *hub) unregister(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.users[c.user.ID]
	if _, ok := set[c]; !ok {
		return
	}
	delete(set, c)
	if len(set) == 0 {
		delete(h.users, c.user.ID)
	}
	h.count--
	h.wg.Done()
	h.s.m.wsClients.Dec()
}

func (h *hub) isClosed() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closed
}

// closeAll closes every client and waits (briefly) for their connections to wind down.
func (h *hub) closeAll() {
	h.mu.Lock()
	h.closed = true
	for _, set := range h.users {
		for c := range set {
			c.close()
		}
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		h.s.log.Warn("websocket clients did not close in time")
	}
}

func (h *hub) cachedOwner(sessionID string) (string, bool) {
	h.ownMu.RLock()
	defer h.ownMu.RUnlock()
	u, ok := h.owners[sessionID]
	return u, ok
}

func (h *hub) setOwner(sessionID, userID string) {
	h.ownMu.Lock()
	defer h.ownMu.Unlock()
	if len(h.owners) >= 100_000 {
		// A cache, not a record: start over rather than grow without bound.
		h.owners = make(map[string]string)
	}
	h.owners[sessionID] = userID
}

// owner resolves a session's user, caching the answer. Unknown sessions resolve to "".
func (h *hub) owner(sessionID string) string {
	if u, ok := h.cachedOwner(sessionID); ok {
		return u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sess, err := h.s.st.GetSession(ctx, sessionID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			h.s.storeErr("get_session", err)
			return "" // not cached: the next event tries again
		}
		h.setOwner(sessionID, "")
		return ""
	}
	h.setOwner(sessionID, sess.UserID)
	return sess.UserID
}

// clientsOf returns a snapshot of the user's clients.
func (h *hub) clientsOf(userID string) []*client {
	h.mu.RLock()
	defer h.mu.RUnlock()
	set := h.users[userID]
	if len(set) == 0 {
		return nil
	}
	out := make([]*client, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	return out
}

func (h *hub) anyClients() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.count > 0
}

func (h *hub) toUser(userID string, f *wsFrame) {
	cs := h.clientsOf(userID)
	if len(cs) == 0 {
		return
	}
	data, err := json.Marshal(f)
	if err != nil {
		h.s.log.Error("encode websocket frame", "type", f.Type, "err", err)
		return
	}
	for _, c := range cs {
		c.enqueue(outFrame{data: data})
	}
}

// onEvent is the agent subscriber. It runs in the run's goroutine, so it only encodes and enqueues.
func (h *hub) onEvent(ev agent.Event) {
	defer h.s.recoverGo("websocket event routing")
	at := ev.At
	if at.IsZero() {
		at = time.Now()
	}
	h.trackRun(ev)
	if !h.anyClients() {
		return
	}
	userID := h.owner(ev.SessionID)
	if userID == "" {
		return
	}
	cs := h.clientsOf(userID)
	if len(cs) == 0 {
		return
	}
	f := &wsFrame{Type: string(ev.Type), SessionID: ev.SessionID, RunID: ev.RunID}
	switch ev.Type {
	case agent.EventRunStarted:
		f.UserMessageID, f.Model = ev.UserMessageID, ev.Model
	case agent.EventToolStarted:
		f.CallID, f.Tool, f.Arguments = ev.CallID, ev.Tool, ev.Arguments
	case agent.EventToolFinished:
		ok := ev.OK
		f.CallID, f.Tool, f.OK = ev.CallID, ev.Tool, &ok
	case agent.EventAnswerDelta:
		f.Text = ev.Text
		data, err := json.Marshal(f)
		if err != nil {
			return
		}
		queued := false
		for _, c := range cs {
			if c.enqueue(outFrame{data: data, at: at}) {
				queued = true
			}
		}
		if queued {
			// The send just made a connection's writer runnable; yield so it gets the CPU before
			// this run goroutine goes on with CPU-heavy work (rendering, persistence). Without this
			// the delta waits for the next preemption on a busy machine (measured: p99 tens of ms).
			// Frames written directly need no yield.
			runtime.Gosched()
		}
		return
	case agent.EventAnswerFinal:
		content := ev.Content
		f.MessageID, f.Content = ev.MessageID, &content
		h.perLang(cs, f, func(lang string) string {
			return markdown.Render(content, nil, markdown.Options{Lang: lang, Anchor: anchorFor(ev.MessageID), MessageID: ev.MessageID})
		})
		return
	case agent.EventCitations:
		content := h.finalContent(ev)
		f.MessageID, f.Citations = ev.MessageID, ev.Citations
		h.perLang(cs, f, func(lang string) string {
			return markdown.Render(content, ev.Citations, markdown.Options{Lang: lang, Anchor: anchorFor(ev.MessageID), MessageID: ev.MessageID})
		})
		return
	case agent.EventRunFinished:
		f.Phase, f.Error = ev.Phase, ev.Error
	default:
		return // an event type this gateway does not know is not forwarded
	}
	data, err := json.Marshal(f)
	if err != nil {
		return
	}
	for _, c := range cs {
		c.enqueue(outFrame{data: data})
	}
}

// perLang renders html once per language among the clients and sends each its version.
func (h *hub) perLang(cs []*client, f *wsFrame, render func(lang string) string) {
	byLang := map[string][]byte{}
	for _, c := range cs {
		data, ok := byLang[c.lang]
		if !ok {
			html := render(c.lang)
			g := *f
			g.HTML = &html
			var err error
			if data, err = json.Marshal(&g); err != nil {
				return
			}
			byLang[c.lang] = data
		}
		c.enqueue(outFrame{data: data})
	}
}

// finalContent is the answer the citations event belongs to: from answer.final of the same run,
// else from the store.
func (h *hub) finalContent(ev agent.Event) string {
	if ev.Content != "" {
		return ev.Content
	}
	h.runMu.Lock()
	st := h.runs[ev.RunID]
	h.runMu.Unlock()
	if st != nil && st.messageID == ev.MessageID {
		return st.content
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := h.s.st.GetMessage(ctx, ev.MessageID)
	if err != nil {
		h.s.storeErr("get_message", err)
		return ""
	}
	return m.Content
}

// trackRun keeps per-run state and records run metrics.
func (h *hub) trackRun(ev agent.Event) {
	h.runMu.Lock()
	defer h.runMu.Unlock()
	switch ev.Type {
	case agent.EventRunStarted:
		h.runs[ev.RunID] = &runState{}
	case agent.EventAnswerFinal:
		st := h.runs[ev.RunID]
		if st == nil {
			st = &runState{}
			h.runs[ev.RunID] = st
		}
		st.content, st.messageID = ev.Content, ev.MessageID
	case agent.EventCitations:
		if st := h.runs[ev.RunID]; st != nil {
			st.cits = len(ev.Citations)
		}
	case agent.EventRunFinished:
		st := h.runs[ev.RunID]
		delete(h.runs, ev.RunID)
		ch := ev.Channel
		if ch == "" {
			ch = "unknown"
		}
		h.s.m.runs.WithLabelValues(string(ev.Phase), ch).Inc()
		h.s.m.markers.WithLabelValues("seen").Add(float64(ev.MarkersSeen))
		h.s.m.markers.WithLabelValues("kept").Add(float64(ev.MarkersKept))
		h.s.m.markers.WithLabelValues("dropped").Add(float64(ev.MarkersDropped))
		if ev.Phase == store.PhaseCompleted {
			n := 0
			if st != nil {
				n = st.cits
			}
			h.s.m.citationsPerAns.Observe(float64(n))
		}
	}
}

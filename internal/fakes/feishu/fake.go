// Package feishufake is a protocol-faithful fake of the Feishu/Lark open platform on loopback, for
// tests of the Feishu channel through the real oapi-sdk-go: tenant token, bot info, IM reply, CardKit
// card create / element content / settings, and the long connection (POST /callback/ws/endpoint and a
// websocket carrying the SDK's protobuf frames). It records every request body it receives, checks
// CardKit sequence numbers per card, records per-card operation times, can inject API errors, and
// pushes events over the long connection or to a webhook URL (plain or encrypted and signed).
package feishufake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"

	"github.com/citegate/citegate/citations"
)

// Op names an API operation of the fake (for error injection and records).
type Op string

// Operations the fake serves.
const (
	OpToken    Op = "tenant_access_token"
	OpBotInfo  Op = "bot.info"
	OpEndpoint Op = "ws.endpoint"
	// OpHandshake is the websocket upgrade: an injected code refuses it with that code in the
	// Handshake-Status header (403 forbidden app; 514 auth failed, see HandshakeAuthErrCode).
	OpHandshake    Op = "ws.handshake"
	OpReply        Op = "im.reply"
	OpCardCreate   Op = "cardkit.create"
	OpCardContent  Op = "cardkit.content"
	OpCardSettings Op = "cardkit.settings"
)

// Error codes the fake answers with (the platform's own).
const (
	CodeInvalidToken     = 99991663
	CodeAppSecretInvalid = 10014
	CodeSequence         = 300317
	CodeStreamingClosed  = 300309
	CodeCardTooLarge     = 200860
	CodeContentTooLong   = 300307
	CodeElementNotFound  = 300303
	CodeCardNotFound     = 300301
	CodeCardAlreadySent  = 300311
	CodeMessageTooLong   = 230025
	CodeRateLimited      = 230020
)

// Platform limits the fake enforces.
const (
	MaxTextBody       = 150 * 1024 // bytes of a text message request body
	MaxCardJSON       = 30 * 1024  // bytes of a card entity
	MaxElementContent = 100000     // characters of one element's content
)

// Options configures a Server.
type Options struct {
	AppID, AppSecret string // defaults "cli_fake" / "fake-secret"
	BotOpenID        string // default "ou_fakebot"
	BotName          string // default "citegate"
	// PingInterval (seconds) is sent in the endpoint's ClientConfig. Default 120, which keeps the
	// client's ping loop asleep for a whole test run.
	PingInterval int
	// PongPingInterval, when > 0, is sent as ClientConfig.PingInterval in every pong's payload, as
	// the platform does to reconfigure a live connection.
	PongPingInterval int
	// HandshakeAuthErrCode goes into the Handshake-Autherrcode header of an injected OpHandshake
	// refusal (1000040350 is the connection limit).
	HandshakeAuthErrCode int
	TokenExpire          int // seconds; default 7200
}

// Request is one HTTP request the fake received.
type Request struct {
	Op     Op
	Method string
	Path   string
	Body   []byte
	Time   time.Time
}

// CardOp is one operation on a card entity.
type CardOp struct {
	Op       Op
	Sequence int
	UUID     string
	Content  string // content updates
	Settings string // settings updates
	Code     int    // what the fake answered
	Time     time.Time
}

// Card is a CardKit card entity.
type Card struct {
	ID        string
	JSON      string
	Streaming bool
	Summary   string
	Elements  map[string]string // element_id → content
	Ops       []CardOp
	LastSeq   int
	Sent      bool
}

// Reply is one IM reply the fake accepted.
type Reply struct {
	ReplyTo   string // the message replied to
	MessageID string // the new message
	MsgType   string
	Content   string
	UUID      string
	Time      time.Time
}

// Text is the text of a "text" reply ("" for other types).
func (r Reply) Text() string {
	if r.MsgType != "text" {
		return ""
	}
	var c struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal([]byte(r.Content), &c)
	return c.Text
}

// CardID is the card referenced by an "interactive" reply ("" otherwise).
func (r Reply) CardID() string {
	var c struct {
		Type string `json:"type"`
		Data struct {
			CardID string `json:"card_id"`
		} `json:"data"`
	}
	if r.MsgType != "interactive" || json.Unmarshal([]byte(r.Content), &c) != nil {
		return ""
	}
	return c.Data.CardID
}

// Ack is the client's answer to a pushed data frame.
type Ack struct {
	FrameMessageID string
	Code           int // 200 handled, 500 failed (the platform re-pushes)
	BizRT          string
}

type injection struct {
	op    Op
	code  int
	times int
}

// Server is the fake platform.
type Server struct {
	opt Options
	srv *httptest.Server
	up  websocket.Upgrader

	mu            sync.Mutex
	requests      []Request
	tokens        map[string]bool
	tokenN        int
	injections    []*injection
	cards         map[string]*Card
	cardN         int
	replies       []Reply
	replyByUUID   map[string]string
	replyN        int
	seqViolations int
	conns         []*wsConn
	acks          []Ack
	pending       map[string]chan Ack
	frameN        int
	connected     int           // long connections opened so far
	connectedCh   chan struct{} // closed and replaced on every new connection
	pings         int           // ping frames received
	mutePongs     bool          // stop answering pings (a silent peer)
}

type wsConn struct {
	mu     sync.Mutex // one writer at a time
	c      *websocket.Conn
	closed bool
}

func (w *wsConn) write(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.c.WriteMessage(websocket.BinaryMessage, b)
}

// New starts a fake on a loopback port. Close it when done.
func New(opt Options) *Server {
	if opt.AppID == "" {
		opt.AppID = "cli_fake"
	}
	if opt.AppSecret == "" {
		opt.AppSecret = "fake-secret"
	}
	if opt.BotOpenID == "" {
		opt.BotOpenID = "ou_fakebot"
	}
	if opt.BotName == "" {
		opt.BotName = "citegate"
	}
	if opt.PingInterval <= 0 {
		opt.PingInterval = 120
	}
	if opt.TokenExpire <= 0 {
		opt.TokenExpire = 7200
	}
	s := &Server{
		opt:         opt,
		tokens:      map[string]bool{},
		cards:       map[string]*Card{},
		replyByUUID: map[string]string{},
		pending:     map[string]chan Ack{},
		connectedCh: make(chan struct{}),
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL to configure as the channel's base_url.
func (s *Server) URL() string { return s.srv.URL }

// Options returns the effective options (credentials, bot identity).
func (s *Server) Options() Options { return s.opt }

// Close closes the long connections and stops the server.
func (s *Server) Close() {
	s.DropConnections()
	s.srv.Close()
}

// Pings is the number of ping frames received on long connections.
func (s *Server) Pings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pings
}

// MutePongs makes the fake stop (true) or resume answering pings: a peer that went silent
// without closing the socket.
func (s *Server) MutePongs(mute bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mutePongs = mute
}

// InjectError makes the next `times` calls of op answer with code.
func (s *Server) InjectError(op Op, code, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.injections = append(s.injections, &injection{op: op, code: code, times: times})
}

// ClearInjections drops every error injection still pending.
func (s *Server) ClearInjections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.injections = nil
}

// InvalidateTokens revokes every tenant token issued so far (as an expiry would).
func (s *Server) InvalidateTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]bool{}
}

func (s *Server) injected(op Op) int {
	for i, in := range s.injections {
		if in.op == op && in.times > 0 {
			in.times--
			if in.times == 0 {
				s.injections = append(s.injections[:i], s.injections[i+1:]...)
			}
			return in.code
		}
	}
	return 0
}

var (
	reContent  = regexp.MustCompile(`^/open-apis/cardkit/v1/cards/([^/]+)/elements/([^/]+)/content$`)
	reSettings = regexp.MustCompile(`^/open-apis/cardkit/v1/cards/([^/]+)/settings$`)
	reReply    = regexp.MustCompile(`^/open-apis/im/v1/messages/([^/]+)/reply$`)
)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/ws" {
		s.serveWS(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	var op Op
	var m []string
	switch p := r.URL.Path; {
	case p == "/open-apis/auth/v3/tenant_access_token/internal" && r.Method == http.MethodPost:
		op = OpToken
	case p == "/open-apis/bot/v3/info" && r.Method == http.MethodGet:
		op = OpBotInfo
	case p == larkws.GenEndpointUri && r.Method == http.MethodPost:
		op = OpEndpoint
	case p == "/open-apis/cardkit/v1/cards" && r.Method == http.MethodPost:
		op = OpCardCreate
	default:
		if m = reContent.FindStringSubmatch(p); m != nil && r.Method == http.MethodPut {
			op = OpCardContent
		} else if m = reSettings.FindStringSubmatch(p); m != nil && r.Method == http.MethodPatch {
			op = OpCardSettings
		} else if m = reReply.FindStringSubmatch(p); m != nil && r.Method == http.MethodPost {
			op = OpReply
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.requests = append(s.requests, Request{Op: op, Method: r.Method, Path: r.URL.Path, Body: body, Time: now})
	if op == "" {
		writeJSONLocked(w, http.StatusNotFound, map[string]any{"code": 404, "msg": "not found: " + r.URL.Path})
		return
	}
	if op != OpToken && op != OpEndpoint {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !s.tokens[tok] {
			writeJSONLocked(w, http.StatusBadRequest, codeMsg(CodeInvalidToken, "Invalid access token for authorization. Please make a request with token attached."))
			return
		}
	}
	if code := s.injected(op); code != 0 {
		if op == OpCardContent || op == OpCardSettings {
			if c := s.cards[m[1]]; c != nil {
				c.Ops = append(c.Ops, CardOp{Op: op, Code: code, Time: now})
			}
		}
		status := http.StatusBadRequest
		if op == OpEndpoint { // the endpoint reports refusals in a 200 body
			status = http.StatusOK
		}
		writeJSONLocked(w, status, codeMsg(code, "injected error"))
		return
	}
	switch op {
	case OpToken:
		s.tokenLocked(w, body)
	case OpBotInfo:
		writeJSONLocked(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "bot": map[string]any{
			"activate_status": 2, "app_name": s.opt.BotName, "avatar_url": "", "ip_white_list": []string{}, "open_id": s.opt.BotOpenID,
		}})
	case OpEndpoint:
		s.endpointLocked(w, body)
	case OpCardCreate:
		s.cardCreateLocked(w, body, now)
	case OpCardContent:
		s.cardContentLocked(w, m[1], m[2], body, now)
	case OpCardSettings:
		s.cardSettingsLocked(w, m[1], body, now)
	case OpReply:
		s.replyLocked(w, m[1], body, now)
	}
}

func codeMsg(code int, msg string) map[string]any { return map[string]any{"code": code, "msg": msg} }

func writeJSONLocked(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) tokenLocked(w http.ResponseWriter, body []byte) {
	var req struct {
		AppID     string `json:"app_id"`
		AppSecret string `json:"app_secret"`
	}
	if json.Unmarshal(body, &req) != nil || req.AppID != s.opt.AppID || req.AppSecret != s.opt.AppSecret {
		writeJSONLocked(w, http.StatusOK, codeMsg(CodeAppSecretInvalid, "app secret invalid"))
		return
	}
	s.tokenN++
	tok := fmt.Sprintf("t-fake-%d", s.tokenN)
	s.tokens[tok] = true
	writeJSONLocked(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "tenant_access_token": tok, "expire": s.opt.TokenExpire})
}

func (s *Server) endpointLocked(w http.ResponseWriter, body []byte) {
	var req struct {
		AppID     string `json:"AppID"`
		AppSecret string `json:"AppSecret"`
	}
	if json.Unmarshal(body, &req) != nil || req.AppID != s.opt.AppID || req.AppSecret != s.opt.AppSecret {
		writeJSONLocked(w, http.StatusOK, codeMsg(CodeAppSecretInvalid, "app secret invalid"))
		return
	}
	u := "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/ws?device_id=fake-device&service_id=7&access_key=fake-access-key&ticket=fake-ticket"
	// ReconnectCount 0: when the fake drops a connection the SDK does not dial again, so a test's
	// dropped client stays gone.
	writeJSONLocked(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "data": larkws.Endpoint{
		Url:          u,
		ClientConfig: &larkws.ClientConfig{PingInterval: s.opt.PingInterval},
	}})
}

func (s *Server) cardCreateLocked(w http.ResponseWriter, body []byte, now time.Time) {
	var req struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}
	if json.Unmarshal(body, &req) != nil || req.Type != "card_json" {
		writeJSONLocked(w, http.StatusBadRequest, codeMsg(300100, "invalid card type"))
		return
	}
	if len(req.Data) > MaxCardJSON {
		writeJSONLocked(w, http.StatusBadRequest, codeMsg(CodeCardTooLarge, "card too large"))
		return
	}
	var card struct {
		Schema string `json:"schema"`
		Config struct {
			StreamingMode bool `json:"streaming_mode"`
		} `json:"config"`
		Body struct {
			Elements []struct {
				Tag       string `json:"tag"`
				ElementID string `json:"element_id"`
				Content   string `json:"content"`
			} `json:"elements"`
		} `json:"body"`
	}
	if err := json.Unmarshal([]byte(req.Data), &card); err != nil || card.Schema != "2.0" {
		writeJSONLocked(w, http.StatusBadRequest, codeMsg(300100, "card json invalid or not schema 2.0"))
		return
	}
	s.cardN++
	c := &Card{ID: fmt.Sprintf("card_%d", s.cardN), JSON: req.Data, Streaming: card.Config.StreamingMode, Elements: map[string]string{}}
	for _, e := range card.Body.Elements {
		if e.ElementID != "" {
			c.Elements[e.ElementID] = e.Content
		}
	}
	c.Ops = append(c.Ops, CardOp{Op: OpCardCreate, Time: now})
	s.cards[c.ID] = c
	writeJSONLocked(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "data": map[string]string{"card_id": c.ID}})
}

// sequenceLocked checks the card's sequence rule: strictly increasing over all operations.
func (s *Server) sequenceLocked(c *Card, seq int) bool {
	if seq <= c.LastSeq {
		s.seqViolations++
		return false
	}
	c.LastSeq = seq
	return true
}

func (s *Server) cardContentLocked(w http.ResponseWriter, cardID, elemID string, body []byte, now time.Time) {
	var req struct {
		Content  string `json:"content"`
		Sequence int    `json:"sequence"`
		UUID     string `json:"uuid"`
	}
	c := s.cards[cardID]
	if c == nil {
		writeJSONLocked(w, http.StatusBadRequest, codeMsg(CodeCardNotFound, "card not found"))
		return
	}
	if json.Unmarshal(body, &req) != nil {
		writeJSONLocked(w, http.StatusBadRequest, codeMsg(300100, "bad body"))
		return
	}
	op := CardOp{Op: OpCardContent, Sequence: req.Sequence, UUID: req.UUID, Content: req.Content, Time: now}
	code, msg := 0, "ok"
	switch _, ok := c.Elements[elemID]; {
	case !ok:
		code, msg = CodeElementNotFound, "element not found"
	case req.Sequence < 1 || !s.sequenceLocked(c, req.Sequence):
		code, msg = CodeSequence, "sequence number compare failed"
	case !c.Streaming:
		code, msg = CodeStreamingClosed, "card streaming mode is closed"
	case req.Content == "" || utf8.RuneCountInString(req.Content) > MaxElementContent:
		code, msg = CodeContentTooLong, "content length must be 1-100000"
	case cardSizeWith(c, elemID, req.Content) > MaxCardJSON:
		code, msg = CodeCardTooLarge, "card too large"
	default:
		c.Elements[elemID] = req.Content
	}
	op.Code = code
	c.Ops = append(c.Ops, op)
	writeJSONLocked(w, statusFor(code), codeMsg(code, msg))
}

// cardSizeWith estimates the card's size once elemID holds content: the entity plus the growth of
// the element (both JSON-encoded).
func cardSizeWith(c *Card, elemID, content string) int {
	old, _ := json.Marshal(c.Elements[elemID])
	nw, _ := json.Marshal(content)
	return len(c.JSON) - len(old) + len(nw)
}

func statusFor(code int) int {
	if code == 0 {
		return http.StatusOK
	}
	return http.StatusBadRequest
}

func (s *Server) cardSettingsLocked(w http.ResponseWriter, cardID string, body []byte, now time.Time) {
	var req struct {
		Settings string `json:"settings"`
		Sequence int    `json:"sequence"`
		UUID     string `json:"uuid"`
	}
	c := s.cards[cardID]
	if c == nil {
		writeJSONLocked(w, http.StatusBadRequest, codeMsg(CodeCardNotFound, "card not found"))
		return
	}
	if json.Unmarshal(body, &req) != nil {
		writeJSONLocked(w, http.StatusBadRequest, codeMsg(300100, "bad body"))
		return
	}
	op := CardOp{Op: OpCardSettings, Sequence: req.Sequence, UUID: req.UUID, Settings: req.Settings, Time: now}
	var set struct {
		Config struct {
			StreamingMode *bool `json:"streaming_mode"`
			Summary       *struct {
				Content string `json:"content"`
			} `json:"summary"`
		} `json:"config"`
	}
	code, msg := 0, "ok"
	switch {
	case json.Unmarshal([]byte(req.Settings), &set) != nil:
		code, msg = 300100, "settings is not json"
	case req.Sequence < 1 || !s.sequenceLocked(c, req.Sequence):
		code, msg = CodeSequence, "sequence number compare failed"
	default:
		if set.Config.StreamingMode != nil {
			c.Streaming = *set.Config.StreamingMode
		}
		if set.Config.Summary != nil {
			c.Summary = set.Config.Summary.Content
		}
	}
	op.Code = code
	c.Ops = append(c.Ops, op)
	writeJSONLocked(w, statusFor(code), codeMsg(code, msg))
}

func (s *Server) replyLocked(w http.ResponseWriter, replyTo string, body []byte, now time.Time) {
	var req struct {
		Content string `json:"content"`
		MsgType string `json:"msg_type"`
		UUID    string `json:"uuid"`
	}
	if json.Unmarshal(body, &req) != nil || req.Content == "" || req.MsgType == "" {
		writeJSONLocked(w, http.StatusBadRequest, codeMsg(230001, "invalid request body"))
		return
	}
	if req.UUID != "" {
		if id, ok := s.replyByUUID[req.UUID]; ok { // at most one delivery per uuid
			writeJSONLocked(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "data": map[string]string{"message_id": id}})
			return
		}
	}
	switch req.MsgType {
	case "text":
		if len(body) > MaxTextBody {
			writeJSONLocked(w, http.StatusBadRequest, codeMsg(CodeMessageTooLong, "message too long"))
			return
		}
	case "interactive":
		rep := Reply{MsgType: req.MsgType, Content: req.Content}
		id := rep.CardID()
		c := s.cards[id]
		switch {
		case c == nil:
			writeJSONLocked(w, http.StatusBadRequest, codeMsg(CodeCardNotFound, "card not found"))
			return
		case c.Sent:
			writeJSONLocked(w, http.StatusBadRequest, codeMsg(CodeCardAlreadySent, "card entity already sent"))
			return
		}
		c.Sent = true
	default:
		if len(body) > MaxCardJSON {
			writeJSONLocked(w, http.StatusBadRequest, codeMsg(CodeMessageTooLong, "message too long"))
			return
		}
	}
	s.replyN++
	id := fmt.Sprintf("om_reply_%d", s.replyN)
	if req.UUID != "" {
		s.replyByUUID[req.UUID] = id
	}
	s.replies = append(s.replies, Reply{ReplyTo: replyTo, MessageID: id, MsgType: req.MsgType, Content: req.Content, UUID: req.UUID, Time: now})
	writeJSONLocked(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "data": map[string]string{"message_id": id, "msg_type": req.MsgType}})
}

// serveWS is the long connection: pong every ping, collect acks of pushed frames.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, Request{Op: "ws.connect", Method: r.Method, Path: r.URL.Path, Time: time.Now()})
	s.mu.Unlock()
	s.mu.Lock()
	code := s.injected(OpHandshake)
	s.mu.Unlock()
	if code != 0 {
		w.Header().Set(larkws.HeaderHandshakeStatus, strconv.Itoa(code))
		w.Header().Set(larkws.HeaderHandshakeMsg, "refused by injection")
		if s.opt.HandshakeAuthErrCode != 0 {
			w.Header().Set(larkws.HeaderHandshakeAuthErrCode, strconv.Itoa(s.opt.HandshakeAuthErrCode))
		}
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if r.URL.Query().Get("ticket") != "fake-ticket" {
		w.Header().Set(larkws.HeaderHandshakeStatus, strconv.Itoa(larkws.AuthFailed))
		w.Header().Set(larkws.HeaderHandshakeMsg, "invalid ticket")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	c, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	conn := &wsConn{c: c}
	s.mu.Lock()
	s.conns = append(s.conns, conn)
	s.connected++
	close(s.connectedCh)
	s.connectedCh = make(chan struct{})
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		conn.closed = true
		s.mu.Unlock()
		_ = c.Close()
	}()
	for {
		mt, data, err := c.ReadMessage()
		if err != nil {
			return
		}
		if mt != websocket.BinaryMessage {
			continue
		}
		var f larkws.Frame
		if f.Unmarshal(data) != nil {
			continue
		}
		hs := larkws.Headers(f.Headers)
		switch larkws.FrameType(f.Method) {
		case larkws.FrameTypeControl:
			if hs.GetString(larkws.HeaderType) == string(larkws.MessageTypePing) {
				s.mu.Lock()
				s.pings++
				mute := s.mutePongs
				s.mu.Unlock()
				if mute {
					continue
				}
				pong := larkws.Frame{SeqID: f.SeqID, LogID: f.LogID, Service: f.Service, Method: int32(larkws.FrameTypeControl)}
				pong.Headers = append(pong.Headers, larkws.Header{Key: larkws.HeaderType, Value: string(larkws.MessageTypePong)})
				if n := s.opt.PongPingInterval; n > 0 {
					pong.Payload, _ = json.Marshal(larkws.ClientConfig{PingInterval: n})
				}
				b, _ := pong.Marshal()
				if conn.write(b) != nil {
					return
				}
			}
		case larkws.FrameTypeData:
			var resp larkws.Response
			_ = json.Unmarshal(f.Payload, &resp)
			ack := Ack{FrameMessageID: hs.GetString(larkws.HeaderMessageID), Code: resp.StatusCode, BizRT: hs.GetString(larkws.HeaderBizRt)}
			s.mu.Lock()
			s.acks = append(s.acks, ack)
			ch := s.pending[ack.FrameMessageID]
			delete(s.pending, ack.FrameMessageID)
			s.mu.Unlock()
			if ch != nil {
				ch <- ack
			}
		}
	}
}

// WaitConnected waits until n long connections have been opened since the fake started.
func (s *Server) WaitConnected(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, ch := s.connected, s.connectedCh
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("feishufake: %d of %d long connections: %w", got, n, ctx.Err())
		}
	}
}

// Connected is the number of long connections opened since the fake started.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected
}

// Connections is the number of open long connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.conns {
		if !c.closed {
			n++
		}
	}
	return n
}

// DropConnections closes every long connection (as the platform does on a restart).
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.c.Close()
	}
}

// Push sends event (the event JSON) over the newest long connection as a data frame and waits for
// the client's ack. parts > 1 splits the payload into that many frames (sum/seq headers), which
// the client reassembles.
func (s *Server) Push(ctx context.Context, event []byte, parts int) (Ack, error) {
	s.mu.Lock()
	var conn *wsConn
	for i := len(s.conns) - 1; i >= 0; i-- {
		if !s.conns[i].closed {
			conn = s.conns[i]
			break
		}
	}
	s.mu.Unlock()
	if conn == nil {
		return Ack{}, errors.New("feishufake: no long connection to push to")
	}
	return s.pushOn(ctx, conn, event, parts)
}

// PushOn sends event over the i-th open long connection, counted in the order the connections were
// opened, and waits for its ack: with one connection per replica, started one after the other,
// that is the i-th replica.
func (s *Server) PushOn(ctx context.Context, i int, event []byte, parts int) (Ack, error) {
	s.mu.Lock()
	var open []*wsConn
	for _, c := range s.conns {
		if !c.closed {
			open = append(open, c)
		}
	}
	s.mu.Unlock()
	if i < 0 || i >= len(open) {
		return Ack{}, fmt.Errorf("feishufake: no long connection %d (%d open)", i, len(open))
	}
	return s.pushOn(ctx, open[i], event, parts)
}

// PushEach sends the same event over every open long connection at once, each push a frame of its
// own (its own frame message_id, as a re-push has), and waits for every ack; the acks come back in
// connection order. Feishu hands an event to one of an app's connections at random and pushes it
// again, to a random connection again, while no ack (or a 500) comes back within 3 s
// (notes/channels.md): with one connection per replica, an event can reach every replica. PushEach
// is that worst case, with all the deliveries racing.
func (s *Server) PushEach(ctx context.Context, event []byte) ([]Ack, error) {
	s.mu.Lock()
	var conns []*wsConn
	for _, c := range s.conns {
		if !c.closed {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	if len(conns) == 0 {
		return nil, errors.New("feishufake: no long connection to push to")
	}
	acks := make([]Ack, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acks[i], errs[i] = s.pushOn(ctx, c, event, 1)
		}()
	}
	wg.Wait()
	return acks, errors.Join(errs...)
}

// pushOn sends event over conn (in parts frames) and waits for its ack.
func (s *Server) pushOn(ctx context.Context, conn *wsConn, event []byte, parts int) (Ack, error) {
	if parts < 1 {
		parts = 1
	}
	s.mu.Lock()
	s.frameN++
	frameN := s.frameN
	frameID := fmt.Sprintf("frame_%d", frameN)
	ch := make(chan Ack, 1)
	s.pending[frameID] = ch
	s.mu.Unlock()

	size := (len(event) + parts - 1) / parts
	for i := 0; i < parts; i++ {
		lo, hi := min(i*size, len(event)), min((i+1)*size, len(event))
		f := larkws.Frame{SeqID: uint64(i), LogID: uint64(frameN), Service: 7, Method: int32(larkws.FrameTypeData), Payload: event[lo:hi]}
		for _, h := range [][2]string{
			{larkws.HeaderType, string(larkws.MessageTypeEvent)},
			{larkws.HeaderMessageID, frameID},
			{larkws.HeaderSum, strconv.Itoa(parts)},
			{larkws.HeaderSeq, strconv.Itoa(i)},
			{larkws.HeaderTraceID, "trace-" + frameID},
		} {
			f.Headers = append(f.Headers, larkws.Header{Key: h[0], Value: h[1]})
		}
		b, err := f.Marshal()
		if err != nil {
			return Ack{}, fmt.Errorf("feishufake: marshal frame: %w", err)
		}
		if err := conn.write(b); err != nil {
			return Ack{}, fmt.Errorf("feishufake: push: %w", err)
		}
	}
	select {
	case ack := <-ch:
		return ack, nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, frameID)
		s.mu.Unlock()
		return Ack{}, fmt.Errorf("feishufake: no ack for %s: %w", frameID, ctx.Err())
	}
}

// Requests returns every HTTP request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// RequestsFor returns the requests of one operation.
func (s *Server) RequestsFor(op Op) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Op == op {
			out = append(out, r)
		}
	}
	return out
}

// Acks returns every ack received over the long connections.
func (s *Server) Acks() []Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Ack(nil), s.acks...)
}

// Replies returns the accepted IM replies in order.
func (s *Server) Replies() []Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Reply(nil), s.replies...)
}

// Cards returns copies of the card entities in creation order.
func (s *Server) Cards() []Card {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.cards))
	for id := range s.cards {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(ids[i], "card_"))
		b, _ := strconv.Atoi(strings.TrimPrefix(ids[j], "card_"))
		return a < b
	})
	out := make([]Card, 0, len(ids))
	for _, id := range ids {
		c := *s.cards[id]
		c.Elements = make(map[string]string, len(s.cards[id].Elements))
		for k, v := range s.cards[id].Elements {
			c.Elements[k] = v
		}
		c.Ops = append([]CardOp(nil), s.cards[id].Ops...)
		out = append(out, c)
	}
	return out
}

// SequenceViolations counts CardKit operations whose sequence was not greater than the card's last.
func (s *Server) SequenceViolations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seqViolations
}

// MaxOpsPerSecond is the largest number of operations (create, content, settings) on one card
// within any one-second window, over all cards.
func (s *Server) MaxOpsPerSecond() int {
	best := 0
	for _, c := range s.Cards() {
		for i := range c.Ops {
			n := 0
			for j := i; j < len(c.Ops) && c.Ops[j].Time.Sub(c.Ops[i].Time) < time.Second; j++ {
				n++
			}
			best = max(best, n)
		}
	}
	return best
}

// MarkerViolations returns a description of every received request body that holds a citation
// marker or the start of one ("[^"). Tests assert it is empty.
func (s *Server) MarkerViolations() []string {
	var out []string
	for _, r := range s.Requests() {
		b := string(r.Body)
		if len(citations.Markers(b)) > 0 || strings.Contains(b, "[^") {
			out = append(out, fmt.Sprintf("%s %s: %s", r.Method, r.Path, b))
		}
	}
	return out
}

// Package dingtalkfake is a protocol-faithful DingTalk server on loopback for tests: the Stream
// gateway (POST /v1.0/gateway/connections/open, then a websocket speaking JSON data frames), the
// OpenAPI endpoints citegate uses (access token, robot send, AI card create/stream/update) and the
// per-message session webhook. It records every request body and every frame it receives, can inject
// API errors, and can turn a live connection into a dead one (no pongs, no reads) to exercise the
// client's keepalive.
//
// The wire shapes follow open-dingtalk/dingtalk-stream-sdk-go v0.9.1 (payload.DataFrame,
// payload.DataFrameResponse, chatbot.BotCallbackDataModel) and the OpenAPI documentation; where the
// real platform's exact error code is unknown (an expired session webhook), the fake uses a plausible
// non-zero errcode, which is all a correct client may rely on.
package dingtalkfake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/open-dingtalk/dingtalk-stream-sdk-go/chatbot"
	"github.com/open-dingtalk/dingtalk-stream-sdk-go/payload"
)

// Paths of the endpoints the fake serves.
const (
	PathOpen          = "/v1.0/gateway/connections/open"
	PathConnect       = "/connect"
	PathToken         = "/v1.0/oauth2/accessToken"
	PathOToSend       = "/v1.0/robot/oToMessages/batchSend"
	PathGroupSend     = "/v1.0/robot/groupMessages/send"
	PathCardCreate    = "/v1.0/card/instances/createAndDeliver"
	PathCardStreaming = "/v1.0/card/streaming"
	PathCardInstances = "/v1.0/card/instances"
	PathWebhook       = "/robot/sendBySession"
)

// ErrcodeWebhookExpired is the errcode the fake's session webhook answers (with HTTP 200) once the
// webhook has expired.
const ErrcodeWebhookExpired = 310000

// Options configures a Server. Zero values get defaults.
type Options struct {
	ClientID     string        // accepted client id / appKey; default "ding-client"
	ClientSecret string        // accepted client secret / appSecret; default "ding-secret"
	WebhookTTL   time.Duration // lifetime of a pushed message's session webhook; default 90 min
	TokenTTL     time.Duration // expireIn of issued access tokens; default 2 h
	// DisconnectGrace is how long the server keeps a connection open after sending a SYSTEM
	// disconnect frame (the platform waits 10 s); default 1 s.
	DisconnectGrace time.Duration
}

// Request is one HTTP request the fake received.
type Request struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// Frame is one websocket text frame the fake received from a client, decoded as an ack.
type Frame struct {
	Conn     int // connection number, 1-based in accept order
	Raw      []byte
	Response payload.DataFrameResponse
}

// CardStream is one PUT /v1.0/card/streaming call.
type CardStream struct {
	GUID       string `json:"guid"`
	Key        string `json:"key"`
	Content    string `json:"content"`
	IsFull     bool   `json:"isFull"`
	IsFinalize bool   `json:"isFinalize"`
	IsError    bool   `json:"isError"`
}

// Card is one AI card instance created through createAndDeliver.
type Card struct {
	OutTrackID     string
	TemplateID     string
	OpenSpaceID    string
	Create         map[string]any      // the createAndDeliver body
	Params         map[string]string   // current cardParamMap (create, then instance updates merged)
	ParamUpdates   []map[string]string // every PUT /v1.0/card/instances cardParamMap, in order
	Streams        []CardStream
	FlowStatusSeen []string // every flowStatus value set, in order
}

// Delivery is one user-visible message the fake accepted (webhook, robot OpenAPI send).
type Delivery struct {
	Via            string // "webhook", "oto", "group"
	ConversationID string // webhook: the message's conversation; group: openConversationId
	UserIDs        []string
	MsgType        string // "markdown", "text", or the OpenAPI msgKey
	Title          string
	Text           string
}

type failure struct {
	status int
	body   string
}

type wsConn struct {
	id   int
	c    *websocket.Conn
	wmu  sync.Mutex
	dead bool // no pongs, no reads: a silently broken connection
	done chan struct{}
}

type session struct {
	conversationID string
	expires        time.Time
}

// Server is the fake DingTalk. Create it with New and Close it when done.
type Server struct {
	// URL is the base URL of the fake (use it as both API and stream base URL).
	URL string

	opt Options
	srv *httptest.Server
	up  websocket.Upgrader

	mu            sync.Mutex
	changed       chan struct{}
	requests      []Request
	frames        []Frame
	tickets       map[string]bool
	subscriptions [][]payload.SubscriptionModel
	conns         []*wsConn
	tokens        map[string]time.Time
	tokenCalls    int
	failures      map[string][]failure // "METHOD path" → queued failures
	webhookErrs   []int
	sessions      map[string]session
	cards         map[string]*Card
	cardOrder     []string
	deliveries    []Delivery
	closed        bool
}

// New starts a fake DingTalk on a loopback port.
func New(opt Options) *Server {
	if opt.ClientID == "" {
		opt.ClientID = "ding-client"
	}
	if opt.ClientSecret == "" {
		opt.ClientSecret = "ding-secret"
	}
	if opt.WebhookTTL == 0 {
		opt.WebhookTTL = 90 * time.Minute
	}
	if opt.TokenTTL == 0 {
		opt.TokenTTL = 2 * time.Hour
	}
	if opt.DisconnectGrace == 0 {
		opt.DisconnectGrace = time.Second
	}
	s := &Server{
		opt:      opt,
		changed:  make(chan struct{}),
		tickets:  map[string]bool{},
		tokens:   map[string]time.Time{},
		failures: map[string][]failure{},
		sessions: map[string]session{},
		cards:    map[string]*Card{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathOpen, s.handleOpen)
	mux.HandleFunc("GET "+PathConnect, s.handleConnect)
	mux.HandleFunc("POST "+PathToken, s.handleToken)
	mux.HandleFunc("POST "+PathOToSend, s.authed(s.handleOToSend))
	mux.HandleFunc("POST "+PathGroupSend, s.authed(s.handleGroupSend))
	mux.HandleFunc("POST "+PathCardCreate, s.authed(s.handleCardCreate))
	mux.HandleFunc("PUT "+PathCardStreaming, s.authed(s.handleCardStreaming))
	mux.HandleFunc("PUT "+PathCardInstances, s.authed(s.handleCardInstances))
	mux.HandleFunc("POST "+PathWebhook, s.handleWebhook)
	s.srv = httptest.NewServer(s.record(mux))
	s.URL = s.srv.URL
	return s
}

// Close closes every connection and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	conns := append([]*wsConn(nil), s.conns...)
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.c.Close()
	}
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// notifyLocked wakes everyone blocked in Await. s.mu must be held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Await blocks until cond returns true (it is re-checked after every change of the fake's state) or
// ctx ends. cond may call the Server's accessor methods.
func (s *Server) Await(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("dingtalkfake: await: %w", ctx.Err())
		}
	}
}

// record stores every request (body included) before serving it, and serves injected failures.
func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		key := r.Method + " " + r.URL.Path
		var f *failure
		if q := s.failures[key]; len(q) > 0 {
			f = &q[0]
			s.failures[key] = q[1:]
		}
		s.notifyLocked()
		s.mu.Unlock()
		if f != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(f.status)
			_, _ = io.WriteString(w, f.body)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// FailNext makes the next n requests to method+path answer HTTP status with the OpenAPI error body
// {"code","message","requestid"}.
func (s *Server) FailNext(method, path string, n, status int, code string) {
	body, _ := json.Marshal(map[string]string{"code": code, "message": "injected by dingtalkfake", "requestid": uuid.NewString()})
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures[method+" "+path] = append(s.failures[method+" "+path], failure{status: status, body: string(body)})
	}
}

// FailWebhook makes the next n session-webhook calls answer HTTP 200 with {"errcode":errcode}: the
// platform's way of reporting errors on that endpoint.
func (s *Server) FailWebhook(n, errcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.webhookErrs = append(s.webhookErrs, errcode)
	}
}

// ClearFailures drops every queued injected failure (HTTP and webhook).
func (s *Server) ClearFailures() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = map[string][]failure{}
	s.webhookErrs = nil
}

// ExpireTokens invalidates every access token issued so far (the next API call gets HTTP 401).
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]time.Time{}
}

// Requests returns every HTTP request received so far, optionally only those to path.
func (s *Server) Requests(path string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if path == "" || r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// Frames returns every websocket text frame received from clients.
func (s *Server) Frames() []Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Frame(nil), s.frames...)
}

// AckFor returns the client's response to the frame with the given headers.messageId.
func (s *Server) AckFor(messageID string) (Frame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.frames {
		if f.Response.Headers[payload.DataFrameHeaderKMessageId] == messageID {
			return f, true
		}
	}
	return Frame{}, false
}

// TokenCalls reports how many access tokens were issued.
func (s *Server) TokenCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenCalls
}

// Connections reports how many websocket connections were accepted so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// LiveConnections reports how many accepted connections are still open.
func (s *Server) LiveConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.conns {
		select {
		case <-c.done:
		default:
			n++
		}
	}
	return n
}

// Subscriptions returns the subscriptions of every connections/open request, in order.
func (s *Server) Subscriptions() [][]payload.SubscriptionModel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]payload.SubscriptionModel(nil), s.subscriptions...)
}

// Deliveries returns every user-visible message accepted through a webhook or robot send.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// Cards returns a copy of every AI card, in creation order.
func (s *Server) Cards() []Card {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Card, 0, len(s.cardOrder))
	for _, id := range s.cardOrder {
		c := *s.cards[id]
		c.Params = cloneMap(c.Params)
		c.ParamUpdates = append([]map[string]string(nil), c.ParamUpdates...)
		c.Streams = append([]CardStream(nil), c.Streams...)
		c.FlowStatusSeen = append([]string(nil), c.FlowStatusSeen...)
		out = append(out, c)
	}
	return out
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// apiError writes an OpenAPI-style error.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg, "requestid": uuid.NewString()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ---- Stream gateway ----

func (s *Server) handleOpen(w http.ResponseWriter, r *http.Request) {
	var req payload.ConnectionEndpointRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "InvalidParameter", "bad json: "+err.Error())
		return
	}
	if req.ClientId != s.opt.ClientID || req.ClientSecret != s.opt.ClientSecret {
		apiError(w, http.StatusUnauthorized, "InvalidAuthentication", "clientId or clientSecret is invalid")
		return
	}
	ticket := uuid.NewString()
	s.mu.Lock()
	subs := make([]payload.SubscriptionModel, 0, len(req.Subscriptions))
	for _, sub := range req.Subscriptions {
		if sub != nil {
			subs = append(subs, *sub)
		}
	}
	s.subscriptions = append(s.subscriptions, subs)
	s.tickets[ticket] = true
	s.notifyLocked()
	s.mu.Unlock()
	// The endpoint is built from the request's host, not s.URL: New sets s.URL after the server
	// started serving, and a connection made by another process (a replica told the URL through its
	// environment) gives the race detector no order between that write and this read.
	endpoint := "ws://" + r.Host + PathConnect
	writeJSON(w, http.StatusOK, payload.ConnectionEndpointResponse{Endpoint: endpoint, Ticket: ticket})
}

func (s *Server) handleConnect(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	ok := s.tickets[ticket]
	delete(s.tickets, ticket) // a ticket works once
	closed := s.closed
	s.mu.Unlock()
	if !ok || closed {
		apiError(w, http.StatusUnauthorized, "InvalidTicket", "ticket is invalid or used")
		return
	}
	c, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.mu.Lock()
	wc := &wsConn{id: len(s.conns) + 1, c: c, done: make(chan struct{})}
	s.conns = append(s.conns, wc)
	s.notifyLocked()
	s.mu.Unlock()
	c.SetPingHandler(func(data string) error {
		s.mu.Lock()
		dead := wc.dead
		s.mu.Unlock()
		if dead {
			return nil
		}
		wc.wmu.Lock()
		defer wc.wmu.Unlock()
		err := c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
			return err
		}
		return nil
	})
	go s.readLoop(wc)
}

func (s *Server) readLoop(wc *wsConn) {
	defer func() {
		_ = wc.c.Close()
		s.mu.Lock()
		close(wc.done)
		s.notifyLocked()
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		dead := wc.dead
		s.mu.Unlock()
		if dead {
			// A dead connection neither reads nor answers; it stays open until the client gives up
			// (or the server closes), which is what a half-open TCP connection looks like.
			buf := make([]byte, 1)
			_ = wc.c.NetConn().SetReadDeadline(time.Time{})
			for {
				if _, err := wc.c.NetConn().Read(buf); err != nil {
					return
				}
			}
		}
		typ, data, err := wc.c.ReadMessage()
		if err != nil {
			return
		}
		if typ != websocket.TextMessage {
			continue
		}
		f := Frame{Conn: wc.id, Raw: data}
		_ = json.Unmarshal(data, &f.Response)
		s.mu.Lock()
		s.frames = append(s.frames, f)
		s.notifyLocked()
		s.mu.Unlock()
	}
}

// KillConnections turns every currently open connection into a dead one: the server stops reading
// and stops answering websocket pings, without closing TCP. Connections accepted later are healthy.
func (s *Server) KillConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.dead = true
	}
	s.notifyLocked()
}

// DropConnections closes every open connection at the TCP level.
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := append([]*wsConn(nil), s.conns...)
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.c.Close()
	}
}

// latest returns the newest connection that is open and healthy.
func (s *Server) latest() (*wsConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.conns) - 1; i >= 0; i-- {
		c := s.conns[i]
		select {
		case <-c.done:
			continue
		default:
		}
		if !c.dead {
			return c, nil
		}
	}
	return nil, errors.New("dingtalkfake: no live connection")
}

// WaitConnected blocks until at least n connections were accepted and one is live and healthy.
func (s *Server) WaitConnected(ctx context.Context, n int) error {
	return s.Await(ctx, func() bool {
		if s.Connections() < n {
			return false
		}
		_, err := s.latest()
		return err == nil
	})
}

// SendFrame writes a data frame of the given type and topic on the newest live connection and returns
// its headers.messageId.
func (s *Server) SendFrame(typ, topic, data string) (string, error) {
	c, err := s.latest()
	if err != nil {
		return "", err
	}
	return s.sendFrameOn(c, typ, topic, data)
}

// live returns every open, healthy connection in the order they were accepted.
func (s *Server) live() []*wsConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*wsConn
	for _, c := range s.conns {
		select {
		case <-c.done:
			continue
		default:
		}
		if !c.dead {
			out = append(out, c)
		}
	}
	return out
}

// sendFrameOn writes a data frame on c and returns its headers.messageId (new on every frame).
func (s *Server) sendFrameOn(c *wsConn, typ, topic, data string) (string, error) {
	id := uuid.NewString()
	now := time.Now().UnixMilli()
	df := payload.DataFrame{
		SpecVersion: "1.0",
		Type:        typ,
		Time:        now,
		Headers: payload.DataFrameHeader{
			payload.DataFrameHeaderKTopic:       topic,
			payload.DataFrameHeaderKMessageId:   id,
			payload.DataFrameHeaderKContentType: payload.DataFrameContentTypeKJson,
			payload.DataFrameHeaderKTime:        strconv.FormatInt(now, 10),
		},
		Data: data,
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := c.c.WriteMessage(websocket.TextMessage, df.Encode()); err != nil {
		return "", fmt.Errorf("dingtalkfake: write frame: %w", err)
	}
	return id, nil
}

// BotMessage builds a text chatbot callback. group selects conversationType "2" (then isInAtList is
// true, as DingTalk only delivers group messages that @ the bot).
func BotMessage(conversationID, staffID, text string, group bool) chatbot.BotCallbackDataModel {
	m := chatbot.BotCallbackDataModel{
		ConversationId:   conversationID,
		MsgId:            "msg" + uuid.NewString(),
		SenderNick:       "Tester " + staffID,
		SenderStaffId:    staffID,
		SenderId:         "$:LWCP_v1:$" + staffID,
		ConversationType: "1",
		Msgtype:          "text",
		Text:             chatbot.BotCallbackDataTextModel{Content: text},
		ChatbotUserId:    "$:LWCP_v1:$bot",
	}
	if group {
		m.ConversationType = "2"
		m.IsInAtList = true
		m.ConversationTitle = "Test group"
	}
	return m
}

// PushBotMessage sends m as a CALLBACK frame on topic /v1.0/im/bot/messages/get over the newest live
// connection. Unless m already carries one, it gets a session webhook pointing at the fake (valid for
// Options.WebhookTTL) and a creation time. It returns the message as sent and the frame's
// headers.messageId (which, as on the platform, differs on every push of the same msgId).
func (s *Server) PushBotMessage(m chatbot.BotCallbackDataModel) (chatbot.BotCallbackDataModel, string, error) {
	m = s.withWebhook(m)
	data, err := json.Marshal(m)
	if err != nil {
		return m, "", fmt.Errorf("dingtalkfake: encode bot message: %w", err)
	}
	id, err := s.SendFrame("CALLBACK", payload.BotMessageCallbackTopic, string(data))
	return m, id, err
}

// PushBotMessageOn sends a bot message as a CALLBACK frame on the i-th live connection, counted in
// the order the connections were accepted, and returns the message as sent and the frame's id.
func (s *Server) PushBotMessageOn(i int, m chatbot.BotCallbackDataModel) (chatbot.BotCallbackDataModel, string, error) {
	m = s.withWebhook(m)
	data, err := json.Marshal(m)
	if err != nil {
		return m, "", fmt.Errorf("dingtalkfake: encode bot message: %w", err)
	}
	conns := s.live()
	if i < 0 || i >= len(conns) {
		return m, "", fmt.Errorf("dingtalkfake: no live connection %d (%d live)", i, len(conns))
	}
	id, err := s.sendFrameOn(conns[i], "CALLBACK", payload.BotMessageCallbackTopic, string(data))
	return m, id, err
}

// PushBotMessageEach sends the same bot message (one msgId, one session webhook) as a CALLBACK
// frame on every live connection at once, each frame with its own headers.messageId, and returns
// the message as sent and the frame ids in connection order (their acks: AckFor). DingTalk hands a
// push to one random connection of the app and may push the same message again (notes/channels.md):
// with one connection per replica, the pushes of one message can reach every replica.
// PushBotMessageEach is that worst case, with all the deliveries racing.
func (s *Server) PushBotMessageEach(m chatbot.BotCallbackDataModel) (chatbot.BotCallbackDataModel, []string, error) {
	m = s.withWebhook(m)
	data, err := json.Marshal(m)
	if err != nil {
		return m, nil, fmt.Errorf("dingtalkfake: encode bot message: %w", err)
	}
	conns := s.live()
	if len(conns) == 0 {
		return m, nil, errors.New("dingtalkfake: no live connection")
	}
	ids := make([]string, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], errs[i] = s.sendFrameOn(c, "CALLBACK", payload.BotMessageCallbackTopic, string(data))
		}()
	}
	wg.Wait()
	return m, ids, errors.Join(errs...)
}

// withWebhook gives m, unless it already carries them, a creation time and a session webhook pointing
// at the fake (valid for Options.WebhookTTL).
func (s *Server) withWebhook(m chatbot.BotCallbackDataModel) chatbot.BotCallbackDataModel {
	now := time.Now()
	if m.CreateAt == 0 {
		m.CreateAt = now.UnixMilli()
	}
	if m.SessionWebhook == "" {
		sid := uuid.NewString()
		exp := now.Add(s.opt.WebhookTTL)
		if m.SessionWebhookExpiredTime != 0 {
			exp = time.UnixMilli(m.SessionWebhookExpiredTime)
		}
		s.mu.Lock()
		s.sessions[sid] = session{conversationID: m.ConversationId, expires: exp}
		s.mu.Unlock()
		m.SessionWebhook = s.URL + PathWebhook + "?session=" + sid
		m.SessionWebhookExpiredTime = exp.UnixMilli()
	}
	return m
}

// SendPing sends a SYSTEM ping frame with an opaque payload and returns the frame id and the data
// the client must echo.
func (s *Server) SendPing() (id, data string, err error) {
	data = fmt.Sprintf(`{"opaque":%q}`, uuid.NewString())
	id, err = s.SendFrame("SYSTEM", "ping", data)
	return id, data, err
}

// SendDisconnect sends a SYSTEM disconnect frame on the newest live connection and closes that
// connection after Options.DisconnectGrace, as the platform does.
func (s *Server) SendDisconnect() error {
	c, err := s.latest()
	if err != nil {
		return err
	}
	if _, err := s.SendFrame("SYSTEM", "disconnect", `{"reason":"gateway restart"}`); err != nil {
		return err
	}
	go func() {
		select {
		case <-c.done:
		case <-time.After(s.opt.DisconnectGrace):
			_ = c.c.Close()
		}
	}()
	return nil
}

// ---- OpenAPI ----

func (s *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AppKey    string `json:"appKey"`
		AppSecret string `json:"appSecret"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "InvalidParameter", "bad json")
		return
	}
	if req.AppKey != s.opt.ClientID || req.AppSecret != s.opt.ClientSecret {
		apiError(w, http.StatusBadRequest, "invalidClientIdOrSecret", "无效的clientId或者clientSecret")
		return
	}
	tok := "tok-" + uuid.NewString()
	s.mu.Lock()
	s.tokens[tok] = time.Now().Add(s.opt.TokenTTL)
	s.tokenCalls++
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"accessToken": tok, "expireIn": int(s.opt.TokenTTL / time.Second)})
}

// authed checks x-acs-dingtalk-access-token.
func (s *Server) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("x-acs-dingtalk-access-token")
		s.mu.Lock()
		exp, ok := s.tokens[tok]
		s.mu.Unlock()
		if !ok || time.Now().After(exp) {
			apiError(w, http.StatusUnauthorized, "InvalidAuthentication", "不合法的access_token")
			return
		}
		next(w, r)
	}
}

type robotSend struct {
	RobotCode          string   `json:"robotCode"`
	UserIDs            []string `json:"userIds"`
	OpenConversationID string   `json:"openConversationId"`
	MsgKey             string   `json:"msgKey"`
	MsgParam           string   `json:"msgParam"`
}

// decodeRobotSend validates the body of a robot send and returns the delivery it describes.
func (s *Server) decodeRobotSend(w http.ResponseWriter, r *http.Request) (robotSend, Delivery, bool) {
	var req robotSend
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "InvalidParameter", "bad json")
		return req, Delivery{}, false
	}
	if req.RobotCode == "" || req.MsgKey == "" {
		apiError(w, http.StatusBadRequest, "MissingParameter", "robotCode and msgKey are required")
		return req, Delivery{}, false
	}
	var param map[string]string
	if err := json.Unmarshal([]byte(req.MsgParam), &param); err != nil {
		apiError(w, http.StatusBadRequest, "InvalidParameter.MsgParam", "msgParam must be a JSON object string")
		return req, Delivery{}, false
	}
	if len(req.MsgParam) > 15000 {
		apiError(w, http.StatusBadRequest, "InvalidParameter.MsgParam.Length", "msgParam exceeds 15000 bytes")
		return req, Delivery{}, false
	}
	d := Delivery{MsgType: req.MsgKey, Title: param["title"], Text: param["text"]}
	if req.MsgKey == "sampleText" {
		d.Text = param["content"]
	}
	return req, d, true
}

func (s *Server) handleOToSend(w http.ResponseWriter, r *http.Request) {
	req, d, ok := s.decodeRobotSend(w, r)
	if !ok {
		return
	}
	if len(req.UserIDs) == 0 {
		apiError(w, http.StatusBadRequest, "MissingParameter", "userIds is required")
		return
	}
	d.Via, d.UserIDs = "oto", req.UserIDs
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"processQueryKey": uuid.NewString(), "invalidStaffIdList": []string{}, "flowControlledStaffIdList": []string{}})
}

func (s *Server) handleGroupSend(w http.ResponseWriter, r *http.Request) {
	req, d, ok := s.decodeRobotSend(w, r)
	if !ok {
		return
	}
	if req.OpenConversationID == "" {
		apiError(w, http.StatusBadRequest, "MissingParameter", "openConversationId is required")
		return
	}
	d.Via, d.ConversationID = "group", req.OpenConversationID
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"processQueryKey": uuid.NewString()})
}

func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	sid := r.URL.Query().Get("session")
	s.mu.Lock()
	sess, ok := s.sessions[sid]
	var injected int
	if len(s.webhookErrs) > 0 {
		injected = s.webhookErrs[0]
		s.webhookErrs = s.webhookErrs[1:]
	}
	s.mu.Unlock()
	// The platform reports webhook errors in an HTTP 200 body; that is the pitfall the fake keeps.
	switch {
	case injected != 0:
		writeJSON(w, http.StatusOK, map[string]any{"errcode": injected, "errmsg": "injected by dingtalkfake"})
		return
	case !ok:
		writeJSON(w, http.StatusOK, map[string]any{"errcode": 300001, "errmsg": "session不存在"})
		return
	case time.Now().After(sess.expires):
		writeJSON(w, http.StatusOK, map[string]any{"errcode": ErrcodeWebhookExpired, "errmsg": "session已过期"})
		return
	}
	var req struct {
		MsgType  string `json:"msgtype"`
		Markdown struct {
			Title string `json:"title"`
			Text  string `json:"text"`
		} `json:"markdown"`
		Text struct {
			Content string `json:"content"`
		} `json:"text"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"errcode": 40035, "errmsg": "缺少参数 json"})
		return
	}
	d := Delivery{Via: "webhook", ConversationID: sess.conversationID, MsgType: req.MsgType}
	switch req.MsgType {
	case "markdown":
		d.Title, d.Text = req.Markdown.Title, req.Markdown.Text
	case "text":
		d.Text = req.Text.Content
	default:
		writeJSON(w, http.StatusOK, map[string]any{"errcode": 40035, "errmsg": "不支持的msgtype"})
		return
	}
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "ok"})
}

// ---- AI cards ----

func (s *Server) handleCardCreate(w http.ResponseWriter, r *http.Request) {
	var raw map[string]any
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		apiError(w, http.StatusBadRequest, "InvalidParameter", "bad json")
		return
	}
	str := func(k string) string { v, _ := raw[k].(string); return v }
	out, tmpl, space := str("outTrackId"), str("cardTemplateId"), str("openSpaceId")
	if out == "" || tmpl == "" || space == "" {
		apiError(w, http.StatusBadRequest, "MissingParameter", "outTrackId, cardTemplateId and openSpaceId are required")
		return
	}
	if str("callbackType") != "STREAM" {
		apiError(w, http.StatusBadRequest, "InvalidParameter.CallbackType", "callbackType must be STREAM")
		return
	}
	switch {
	case strings.HasPrefix(space, "dtv1.card//IM_GROUP."):
		if _, ok := raw["imGroupOpenDeliverModel"].(map[string]any); !ok {
			apiError(w, http.StatusBadRequest, "MissingParameter", "imGroupOpenDeliverModel is required for IM_GROUP")
			return
		}
	case strings.HasPrefix(space, "dtv1.card//IM_ROBOT."):
		if _, ok := raw["imRobotOpenDeliverModel"].(map[string]any); !ok {
			apiError(w, http.StatusBadRequest, "MissingParameter", "imRobotOpenDeliverModel is required for IM_ROBOT")
			return
		}
	default:
		apiError(w, http.StatusBadRequest, "InvalidParameter.OpenSpaceId", "unknown openSpaceId")
		return
	}
	params := map[string]string{}
	if cd, ok := raw["cardData"].(map[string]any); ok {
		if pm, ok := cd["cardParamMap"].(map[string]any); ok {
			for k, v := range pm {
				sv, ok := v.(string)
				if !ok {
					apiError(w, http.StatusBadRequest, "InvalidParameter.CardParamMap", "cardParamMap values must be strings")
					return
				}
				params[k] = sv
			}
		}
	}
	s.mu.Lock()
	if _, dup := s.cards[out]; dup {
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, "param.outTrackIdExists", "outTrackId already used")
		return
	}
	c := &Card{OutTrackID: out, TemplateID: tmpl, OpenSpaceID: space, Create: raw, Params: params}
	if fs := params["flowStatus"]; fs != "" {
		c.FlowStatusSeen = append(c.FlowStatusSeen, fs)
	}
	s.cards[out] = c
	s.cardOrder = append(s.cardOrder, out)
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "result": map[string]any{
		"outTrackId":     out,
		"deliverResults": []map[string]any{{"spaceId": space, "success": true, "carrierId": uuid.NewString()}},
	}})
}

func (s *Server) handleCardStreaming(w http.ResponseWriter, r *http.Request) {
	var req struct {
		OutTrackID string `json:"outTrackId"`
		CardStream
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "InvalidParameter", "bad json")
		return
	}
	if req.GUID == "" || req.Key == "" {
		apiError(w, http.StatusBadRequest, "MissingParameter", "guid and key are required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cards[req.OutTrackID]
	if !ok {
		apiError(w, http.StatusNotFound, "card.instanceNotFound", "no card with this outTrackId")
		return
	}
	for _, st := range c.Streams {
		if st.GUID == req.GUID {
			apiError(w, http.StatusBadRequest, "param.guidRepeated", "guid already used")
			return
		}
	}
	c.Streams = append(c.Streams, req.CardStream)
	s.notifyLocked()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "result": true})
}

func (s *Server) handleCardInstances(w http.ResponseWriter, r *http.Request) {
	var req struct {
		OutTrackID string `json:"outTrackId"`
		CardData   struct {
			CardParamMap map[string]string `json:"cardParamMap"`
		} `json:"cardData"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "InvalidParameter", "bad json (cardParamMap values must be strings)")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cards[req.OutTrackID]
	if !ok {
		apiError(w, http.StatusNotFound, "card.instanceNotFound", "no card with this outTrackId")
		return
	}
	c.ParamUpdates = append(c.ParamUpdates, cloneMap(req.CardData.CardParamMap))
	for k, v := range req.CardData.CardParamMap {
		c.Params[k] = v
	}
	if fs := req.CardData.CardParamMap["flowStatus"]; fs != "" {
		c.FlowStatusSeen = append(c.FlowStatusSeen, fs)
	}
	s.notifyLocked()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "result": true})
}

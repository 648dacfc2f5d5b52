package dingtalk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/open-dingtalk/dingtalk-stream-sdk-go/chatbot"
	"github.com/open-dingtalk/dingtalk-stream-sdk-go/payload"

	"github.com/citegate/citegate/channels"
)

// userAgent identifies citegate's Stream client to the gateway.
const userAgent = "citegate-dingtalk-stream/1 (dingtalk-stream-sdk-go/v0.9.1 payload)"

// OpenError is a failed POST /v1.0/gateway/connections/open.
type OpenError struct {
	Status  int
	Code    string
	Message string
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("dingtalk: connections/open: HTTP %d code=%s: %s", e.Status, e.Code, e.Message)
}

// permanent reports a client error that retrying cannot fix (bad credentials, bad request).
func (e *OpenError) permanent() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests && e.Status != http.StatusRequestTimeout
}

// errDisconnect ends a connection on the server's SYSTEM disconnect frame.
var errDisconnect = errors.New("dingtalk: server asked to disconnect")

// Start opens a Stream connection and delivers chatbot messages to h until ctx ends, reconnecting
// with exponential backoff and a fresh ticket whenever a connection ends. It returns an error only
// when the very first connections/open is refused with a client error (bad credentials): a channel
// that never worked is reported, one that worked keeps trying.
func (c *Channel) Start(ctx context.Context, h channels.Handler) error {
	if h == nil {
		return errors.New("dingtalk: start: nil handler")
	}
	first := true
	failures := 0
	for ctx.Err() == nil {
		ep, err := c.openConnection(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			var oe *OpenError
			if first && errors.As(err, &oe) && oe.permanent() {
				return fmt.Errorf("dingtalk: cannot start (check client_id/client_secret): %w", err)
			}
			failures++
			channels.MarkLost(ctx, err, failures)
			d := c.backoff(failures)
			c.log.Warn("dingtalk: stream connection open failed; retrying", "err", err, "attempt", failures, "delay", d)
			sleepCtx(ctx, d)
			continue
		}
		first = false
		dialed, err := c.runConnection(ctx, ep, h)
		if ctx.Err() != nil {
			break
		}
		if dialed {
			failures = 0
		} else {
			failures++
			// Down for more than one quick reconnect: /readyz and the metrics say so until the
			// next socket opens (runConnection marks it ready).
			channels.MarkLost(ctx, err, failures)
		}
		d := c.backoff(failures)
		c.log.Warn("dingtalk: stream connection ended; reconnecting", "err", err, "delay", d)
		sleepCtx(ctx, d)
	}
	c.log.Info("dingtalk: stream stopped")
	return nil
}

// backoff is the delay before the next attempt after n consecutive failures: a short jittered pause
// after a connection that worked (n = 0), else ReconnectBackoff·2^(n-1) capped, jittered in [d/2, d].
func (c *Channel) backoff(n int) time.Duration {
	base, maxD := c.cfg.ReconnectBackoff, c.cfg.MaxReconnectBackoff
	if n <= 0 {
		return rand.N(base/4 + 1)
	}
	return channels.Backoff(base, maxD, n, rand.Float64)
}

// openConnection asks the gateway for an endpoint and a one-time ticket.
func (c *Channel) openConnection(ctx context.Context) (*payload.ConnectionEndpointResponse, error) {
	reqBody := payload.ConnectionEndpointRequest{
		ClientId:     c.cfg.ClientID,
		ClientSecret: c.cfg.ClientSecret,
		Subscriptions: []*payload.SubscriptionModel{
			{Type: "SYSTEM", Topic: "ping"},
			{Type: "SYSTEM", Topic: "disconnect"},
			{Type: "CALLBACK", Topic: payload.BotMessageCallbackTopic},
		},
		UserAgent: userAgent,
		LocalIP:   localIP(),
		Extras:    map[string]string{},
	}
	body, _ := json.Marshal(reqBody)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.StreamBaseURL+"/v1.0/gateway/connections/open", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("dingtalk: connections/open: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("dingtalk: connections/open: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("dingtalk: connections/open: read: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		oe := &OpenError{Status: resp.StatusCode}
		var e struct{ Code, Message string }
		if json.Unmarshal(raw, &e) == nil {
			oe.Code, oe.Message = e.Code, e.Message
		}
		if oe.Message == "" {
			oe.Message = http.StatusText(resp.StatusCode)
		}
		return nil, oe
	}
	var ep payload.ConnectionEndpointResponse
	if err := json.Unmarshal(raw, &ep); err != nil {
		return nil, fmt.Errorf("dingtalk: connections/open: decode: %w", err)
	}
	if err := ep.Valid(); err != nil {
		return nil, fmt.Errorf("dingtalk: connections/open: %w", err)
	}
	return &ep, nil
}

// localIP reports the first non-loopback IPv4 address (the gateway wants it for diagnostics).
func localIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// conn is one live Stream websocket. gorilla allows one concurrent writer; wmu serializes acks and
// pings.
type conn struct {
	ws  *websocket.Conn
	wmu sync.Mutex
}

func (k *conn) writeJSON(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	k.wmu.Lock()
	defer k.wmu.Unlock()
	_ = k.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return k.ws.WriteMessage(websocket.TextMessage, data)
}

func (k *conn) ping() error {
	k.wmu.Lock()
	defer k.wmu.Unlock()
	return k.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second))
}

// runConnection dials the endpoint and serves frames until the connection dies, the server asks to
// disconnect, or ctx ends. dialed reports whether the websocket was established.
func (c *Channel) runConnection(ctx context.Context, ep *payload.ConnectionEndpointResponse, h channels.Handler) (dialed bool, err error) {
	u, err := url.Parse(ep.Endpoint)
	if err != nil {
		return false, fmt.Errorf("dingtalk: bad endpoint: %w", err)
	}
	q := u.Query()
	q.Set("ticket", ep.Ticket)
	u.RawQuery = q.Encode()
	dialer := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 15 * time.Second}
	ws, resp, err := dialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		if resp != nil {
			return false, fmt.Errorf("dingtalk: dial stream endpoint: HTTP %d: %w", resp.StatusCode, err)
		}
		return false, fmt.Errorf("dingtalk: dial stream endpoint: %w", err)
	}
	k := &conn{ws: ws}
	c.log.Info("dingtalk: stream connected")
	channels.MarkReady(ctx)

	connCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		_ = ws.Close()
		wg.Wait()
	}()

	// Liveness: every pong or frame pushes the read deadline out; a silent peer (no pong to our
	// pings, no frames) makes ReadMessage fail and the connection is replaced. This replaces the SDK's
	// keepalive, whose timeout path can send on a closed channel and kill the process.
	ka := c.cfg.KeepAlive
	idle := ka + min(ka, 10*time.Second)
	alive := func() { _ = ws.SetReadDeadline(time.Now().Add(idle)) }
	alive()
	ws.SetPongHandler(func(string) error { alive(); return nil })

	wg.Add(2)
	go func() {
		defer wg.Done()
		defer channels.LogPanic(c.log, "stream closer")
		<-connCtx.Done()
		_ = ws.Close() // unblocks ReadMessage on shutdown
	}()
	go func() {
		defer wg.Done()
		defer channels.LogPanic(c.log, "stream pinger")
		t := time.NewTicker(ka)
		defer t.Stop()
		for {
			select {
			case <-connCtx.Done():
				return
			case <-t.C:
				if err := k.ping(); err != nil {
					c.log.Warn("dingtalk: websocket ping failed", "err", err)
					cancel()
					return
				}
			}
		}
	}()

	for {
		typ, data, err := ws.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return true, nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return true, fmt.Errorf("dingtalk: stream silent for %s (no pong): %w", idle, err)
			}
			return true, fmt.Errorf("dingtalk: stream read: %w", err)
		}
		alive()
		if typ != websocket.TextMessage {
			continue
		}
		if err := c.safeHandleFrame(ctx, k, data, h); err != nil {
			return true, err
		}
	}
}

// safeHandleFrame is handleFrame with a recover: a malformed frame that trips a bug must not take the
// gateway down (the read loop runs on the caller's goroutine).
func (c *Channel) safeHandleFrame(ctx context.Context, k *conn, data []byte, h channels.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("dingtalk: frame handling panicked; frame dropped", "panic", r, "bytes", len(data))
			err = nil
		}
	}()
	return c.handleFrame(ctx, k, data, h)
}

// handleFrame answers one data frame. It returns errDisconnect when the server asks us to go.
func (c *Channel) handleFrame(ctx context.Context, k *conn, data []byte, h channels.Handler) error {
	df, err := payload.DecodeDataFrame(data)
	if err != nil || df.Headers == nil {
		c.log.Warn("dingtalk: undecodable stream frame ignored", "bytes", len(data), "err", err)
		return nil
	}
	ack := &payload.DataFrameResponse{
		Code: payload.DataFrameResponseStatusCodeKOK,
		Headers: payload.DataFrameHeader{
			payload.DataFrameHeaderKMessageId:   df.GetMessageId(),
			payload.DataFrameHeaderKContentType: payload.DataFrameContentTypeKJson,
		},
		Message: "OK",
	}
	switch {
	case df.Type == "SYSTEM" && df.GetTopic() == "ping":
		// The SDK's OnPing: echo the opaque data.
		ack.Message = "ok"
		ack.Data = df.Data
	case df.Type == "SYSTEM" && df.GetTopic() == "disconnect":
		c.log.Info("dingtalk: server sent disconnect", "data", df.Data)
		return errDisconnect
	case df.Type == "CALLBACK" && df.GetTopic() == payload.BotMessageCallbackTopic:
		if err := c.handleBotMessage(ctx, df, h); err != nil {
			c.log.Warn("dingtalk: bot message rejected", "err", err)
		}
		// The Python SDK's callback ack body; the bot answers through its own API calls.
		ack.Data = `{"response":null}`
	case df.Type == "SYSTEM":
		// Unknown system topics are acknowledged so the gateway does not retry them.
	default:
		ack.Code = payload.DataFrameResponseStatusCodeKHandlerNotFound
		ack.Message = "no handler for " + df.Type + " " + df.GetTopic()
	}
	if err := k.writeJSON(ack); err != nil {
		return fmt.Errorf("dingtalk: write ack: %w", err)
	}
	return nil
}

// handleBotMessage turns a chatbot callback into a channels.Message and hands it to h. h returns
// quickly (the run is asynchronous); calling it inline keeps one conversation's messages in order.
func (c *Channel) handleBotMessage(ctx context.Context, df *payload.DataFrame, h channels.Handler) (err error) {
	var bm chatbot.BotCallbackDataModel
	if err := json.Unmarshal([]byte(df.Data), &bm); err != nil {
		return fmt.Errorf("dingtalk: decode bot message: %w", err)
	}
	m, ok := c.toMessage(&bm)
	if m.ID == "" {
		return errors.New("dingtalk: bot message without msgId")
	}
	if !ok {
		c.log.Info("dingtalk: unsupported message type", "msgtype", bm.Msgtype, "msg_id", bm.MsgId)
		go func() {
			defer channels.LogPanic(c.log, "unsupported-type notice")
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := c.Send(sctx, m, "暂时只能回答文字消息，请用文字提问。"); err != nil {
				c.log.Warn("dingtalk: notice failed", "err", err)
			}
		}()
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("dingtalk: handler panicked: %v", r)
		}
	}()
	h.HandleMessage(ctx, m)
	return nil
}

// toMessage maps a chatbot callback; ok is false for message types that carry no text we can answer
// (pictures, files). An empty text message is passed on: the dispatcher ignores it.
func (c *Channel) toMessage(bm *chatbot.BotCallbackDataModel) (channels.Message, bool) {
	group := bm.ConversationType == "2"
	sender := bm.SenderStaffId
	if sender == "" {
		sender = bm.SenderId
	}
	ref := &Ref{
		MsgID:          bm.MsgId,
		ConversationID: bm.ConversationId,
		Group:          group,
		StaffID:        bm.SenderStaffId,
		SessionWebhook: bm.SessionWebhook,
	}
	if bm.SessionWebhookExpiredTime > 0 {
		ref.WebhookExpiresAt = time.UnixMilli(bm.SessionWebhookExpiredTime)
	}
	m := channels.Message{
		Channel:        Name,
		ID:             bm.MsgId,
		ConversationID: bm.ConversationId,
		SenderID:       sender,
		SenderName:     bm.SenderNick,
		Group:          group,
		// DingTalk delivers only messages that @ the bot in groups; isInAtList says so explicitly.
		Mentioned: !group || bm.IsInAtList,
		Ref:       ref,
	}
	text, ok := messageText(bm)
	m.Text = c.stripMention(strings.TrimSpace(text))
	return m, ok
}

// messageText extracts the text of text, richText and audio (speech recognition) messages.
func messageText(bm *chatbot.BotCallbackDataModel) (string, bool) {
	switch bm.Msgtype {
	case "text", "":
		return bm.Text.Content, true
	case "richText":
		var rc struct {
			RichText []struct {
				Text string `json:"text"`
			} `json:"richText"`
		}
		if !remarshal(bm.Content, &rc) {
			return "", false
		}
		var b strings.Builder
		for _, part := range rc.RichText {
			b.WriteString(part.Text)
		}
		return b.String(), true
	case "audio":
		var ac struct {
			Recognition string `json:"recognition"`
		}
		if !remarshal(bm.Content, &ac) {
			return "", false
		}
		return ac.Recognition, true
	}
	return "", false
}

// remarshal decodes the SDK's untyped Content field into v.
func remarshal(in any, v any) bool {
	raw, err := json.Marshal(in)
	if err != nil {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}

// stripMention removes a leading "@BotName" when configured.
func (c *Channel) stripMention(text string) string {
	if c.cfg.BotName == "" {
		return text
	}
	if rest, ok := strings.CutPrefix(text, "@"+c.cfg.BotName); ok {
		return strings.TrimSpace(rest)
	}
	return text
}

package feishu

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
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"

	"github.com/citegate/citegate/channels"
)

// The long connection is citegate's own client of Feishu's websocket protocol. It keeps the SDK's
// frame codec (larkws.Frame), its protocol constants and its event dispatcher (decoding and the
// handlers), and replaces the SDK's connection loop (larkws.Client, v3.5.4), which
//   - hands every frame to a goroutine of its own and reassembles a payload split over several
//     frames in an unsynchronised slice, so the parts race (the race detector reports it) and a
//     payload can be lost or delivered twice;
//   - reads and resets its connection fields without the lock from several goroutines;
//   - cannot be stopped: Start ends in select{} and ignores its context, so a stopped channel kept
//     its socket and Feishu kept pushing events to a channel that refused them.
//
// Here one goroutine reads the socket and handles frames in order, reassembly needs no lock, and
// ctx closes the socket and ends every goroutine.

// Reassembly bounds: a payload split over more frames or bytes than this is dropped (Feishu splits
// events of a few KB; the bounds keep a hostile or broken peer from holding memory).
const (
	maxFrameParts   = 64
	maxPayloadBytes = 8 << 20
	partsTTL        = 5 * time.Second // the SDK's cache lifetime for an incomplete payload
)

// maxConfigSeconds caps the server's intervals (an hour): a huge value would overflow
// time.Duration into a negative one, and a negative ping interval pings in a tight loop.
const maxConfigSeconds = 3600

// endpointConfig is what the endpoint (and every pong) says about the connection.
type endpointConfig struct {
	ping      time.Duration // how often to ping; the server's PingInterval, default 120s
	nonce     time.Duration // spread of the first reconnect after a working connection; ReconnectNonce
	serviceID int32
}

func defaultEndpointConfig() endpointConfig {
	return endpointConfig{ping: 2 * time.Minute, nonce: 30 * time.Second}
}

// apply takes the fields the server set; zero fields keep what was there (a zero PingInterval
// would otherwise mean pinging in a tight loop). ReconnectCount and ReconnectInterval are not
// followed: the channel retries for as long as it runs, with its own backoff (reconnectDelay),
// rather than giving up after a count or waiting the SDK's two minutes between attempts.
func (e *endpointConfig) apply(cc *larkws.ClientConfig) {
	if cc == nil {
		return
	}
	if cc.PingInterval > 0 {
		e.ping = time.Duration(min(cc.PingInterval, maxConfigSeconds)) * time.Second
	}
	if cc.ReconnectNonce > 0 {
		e.nonce = time.Duration(min(cc.ReconnectNonce, maxConfigSeconds)) * time.Second
	}
}

// EndpointError is a refused long-connection endpoint request or handshake. Permanent errors
// (credentials, a forbidden app, the connection limit) cannot be fixed by retrying.
type EndpointError struct {
	Code      int
	Msg       string
	Permanent bool
}

func (e *EndpointError) Error() string {
	return fmt.Sprintf("code %d: %s", e.Code, e.Msg)
}

// runLongConn keeps a long connection open until ctx ends, reconnecting with backoff whenever one
// ends. It returns an error only when the very first attempt is refused for good (bad credentials,
// a forbidden app, the connection limit): a channel that never worked is reported, one that worked
// keeps trying.
func (c *Channel) runLongConn(ctx context.Context) error {
	d := c.newEventDispatcher("", "")
	ec := defaultEndpointConfig()
	first, failures := true, 0
	for ctx.Err() == nil {
		u, err := c.endpoint(ctx, &ec)
		var dialed bool
		if err == nil {
			dialed, err = c.serveConn(ctx, u, &ec, d)
		}
		if ctx.Err() != nil {
			break
		}
		var ee *EndpointError
		if first && !dialed && errors.As(err, &ee) && ee.Permanent {
			c.resetStarted()
			c.log.Error("feishu long connection refused", "code", ee.Code, "msg", ee.Msg)
			return fmt.Errorf("feishu: long connection refused (%w)", err)
		}
		if dialed {
			first, failures = false, 0
		} else {
			failures++
			// Down for more than one quick reconnect: /readyz and the metrics say so until the
			// next socket opens (serveConn marks it ready).
			channels.MarkLost(ctx, err, failures)
		}
		wait := c.reconnectDelay(ec, failures)
		c.log.Warn("feishu long connection ended; reconnecting", "err", err, "attempt", failures, "delay", wait.Round(time.Millisecond))
		_ = sleepCtx(ctx, wait)
	}
	c.log.Info("feishu channel stopped")
	return nil
}

// reconnectDelay is the pause before the next attempt after n consecutive failures: after a
// connection that worked (n = 0) a random spread within the server's ReconnectNonce (capped by the
// channel's ReconnectBackoff, so a dropped connection comes back within seconds), else
// ReconnectBackoff·2^(n-1) capped by MaxReconnectBackoff, jittered in [d/2, d].
func (c *Channel) reconnectDelay(ec endpointConfig, n int) time.Duration {
	base, maxD := c.cfg.ReconnectBackoff, c.cfg.MaxReconnectBackoff
	if n <= 0 {
		return rand.N(min(ec.nonce, base) + 1)
	}
	return channels.Backoff(base, maxD, n, rand.Float64)
}

// endpoint asks for a connection URL (POST /callback/ws/endpoint) and takes the client config
// that comes with it.
func (c *Channel) endpoint(ctx context.Context, ec *endpointConfig) (*url.URL, error) {
	body, _ := json.Marshal(map[string]string{"AppID": c.cfg.AppID, "AppSecret": c.cfg.AppSecret})
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+larkws.GenEndpointUri, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("locale", "zh")
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("endpoint: read: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("endpoint: HTTP %d", resp.StatusCode)
	}
	var er larkws.EndpointResp
	if err := json.Unmarshal(raw, &er); err != nil {
		return nil, fmt.Errorf("endpoint: decode: %w", err)
	}
	switch er.Code {
	case larkws.OK:
	case larkws.SystemBusy, larkws.InternalError:
		return nil, &EndpointError{Code: er.Code, Msg: er.Msg}
	default:
		return nil, &EndpointError{Code: er.Code, Msg: er.Msg, Permanent: true}
	}
	if er.Data == nil || er.Data.Url == "" {
		return nil, errors.New("endpoint: answer without a URL")
	}
	u, err := url.Parse(er.Data.Url)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") {
		return nil, fmt.Errorf("endpoint: bad URL (%v)", err)
	}
	ec.apply(er.Data.ClientConfig)
	sid, _ := strconv.ParseInt(u.Query().Get(larkws.ServiceID), 10, 32)
	ec.serviceID = int32(sid)
	return u, nil
}

// handshakeError maps a refused upgrade the way the SDK does (parseErr): a forbidden app, and an
// auth failure because of the connection limit, are permanent.
func handshakeError(resp *http.Response) error {
	code, _ := strconv.Atoi(resp.Header.Get(larkws.HeaderHandshakeStatus))
	msg := resp.Header.Get(larkws.HeaderHandshakeMsg)
	if msg == "" {
		msg = resp.Status
	}
	authCode, _ := strconv.Atoi(resp.Header.Get(larkws.HeaderHandshakeAuthErrCode))
	permanent := code == larkws.Forbidden || (code == larkws.AuthFailed && authCode == larkws.ExceedConnLimit)
	return &EndpointError{Code: code, Msg: msg, Permanent: permanent}
}

// wsConn is one live long connection; gorilla allows one writer at a time.
type wsConn struct {
	ws  *websocket.Conn
	wmu sync.Mutex
}

func (k *wsConn) write(f *larkws.Frame) error {
	b, err := f.Marshal()
	if err != nil {
		return err
	}
	k.wmu.Lock()
	defer k.wmu.Unlock()
	_ = k.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return k.ws.WriteMessage(websocket.BinaryMessage, b)
}

// serveConn dials u and serves frames until the connection dies or ctx ends. dialed reports
// whether the websocket was established.
func (c *Channel) serveConn(ctx context.Context, u *url.URL, ec *endpointConfig, d *dispatcher.EventDispatcher) (dialed bool, err error) {
	dialer := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 15 * time.Second}
	ws, resp, err := dialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		if resp != nil {
			return false, fmt.Errorf("handshake: %w", handshakeError(resp))
		}
		return false, fmt.Errorf("dial: %s", redact(err.Error()))
	}
	k := &wsConn{ws: ws}
	connID := u.Query().Get(larkws.DeviceID)
	c.log.Info("feishu long connection open", "host", u.Host, "conn_id", connID)
	channels.MarkReady(ctx)

	connCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		_ = ws.Close()
		wg.Wait()
	}()

	// Liveness: the server answers every ping with a pong frame; any frame pushes the read deadline
	// out, so a silent peer makes ReadMessage fail and the connection is replaced.
	var cfgMu sync.Mutex
	pingEvery := func() time.Duration { cfgMu.Lock(); defer cfgMu.Unlock(); return ec.ping }
	reconfigured := make(chan struct{}, 1) // a pong changed the ping interval
	// idle is how long the connection may stay silent: the ping interval plus up to 30 s for the pong.
	idle := func() time.Duration { p := pingEvery(); return p + min(p, 30*time.Second) }
	alive := func() { _ = ws.SetReadDeadline(time.Now().Add(idle())) }
	alive()
	ws.SetReadLimit(maxPayloadBytes + 1<<16)

	wg.Add(2)
	go func() {
		defer wg.Done()
		defer channels.LogPanic(c.log, "long connection closer")
		<-connCtx.Done()
		_ = ws.Close() // unblocks ReadMessage
	}()
	go func() {
		defer wg.Done()
		defer channels.LogPanic(c.log, "long connection pinger")
		t := time.NewTimer(0)
		defer t.Stop()
		var last time.Time
		for {
			select {
			case <-connCtx.Done():
				return
			case <-reconfigured:
				// The next ping is due one new interval after the last one.
				t.Reset(max(0, time.Until(last.Add(pingEvery()))))
			case <-t.C:
				if err := k.write(larkws.NewPingFrame(ec.serviceID)); err != nil {
					if connCtx.Err() == nil {
						c.log.Warn("feishu long connection ping failed", "err", err)
						cancel()
					}
					return
				}
				last = time.Now()
				t.Reset(pingEvery())
			}
		}
	}()

	dropped := func(id, why string) {
		c.log.Warn("feishu long connection: event dropped (not acked)", "message_id", id, "why", why)
	}
	fh := &frameHandler{c: c, ctx: ctx, w: k, d: d, parts: newReassembly(dropped), onConfig: func(cc *larkws.ClientConfig) {
		cfgMu.Lock()
		before := ec.ping
		ec.apply(cc)
		changed := ec.ping != before
		cfgMu.Unlock()
		if changed {
			select {
			case reconfigured <- struct{}{}:
			default:
			}
		}
	}}
	for {
		mt, data, err := ws.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return true, nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return true, fmt.Errorf("silent for %s (no pong)", idle())
			}
			return true, fmt.Errorf("read: %w", err)
		}
		alive()
		if mt != websocket.BinaryMessage {
			continue
		}
		if err := fh.safeHandle(data); err != nil {
			return true, err
		}
	}
}

// frameWriter sends one frame on the connection (wsConn; tests record them).
type frameWriter interface {
	write(f *larkws.Frame) error
}

// frameHandler is what one connection's read loop does with each binary message.
type frameHandler struct {
	c        *Channel
	ctx      context.Context
	w        frameWriter
	d        *dispatcher.EventDispatcher
	parts    *reassembly
	onConfig func(*larkws.ClientConfig) // a pong's client config
}

// safeHandle is handle with a recover: a frame that trips a bug is dropped (with a log line), it
// does not end the connection or the process. The error is a failed ack write (the connection is
// gone).
func (h *frameHandler) safeHandle(data []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			h.c.log.Error("feishu long connection: frame handling panicked; frame dropped", "panic", r, "bytes", len(data))
			err = nil
		}
	}()
	return h.handle(data)
}

func (h *frameHandler) handle(data []byte) error {
	var f larkws.Frame
	if err := f.Unmarshal(data); err != nil {
		h.c.log.Warn("feishu long connection: undecodable frame dropped", "bytes", len(data), "err", err)
		return nil
	}
	hs := larkws.Headers(f.Headers)
	switch larkws.FrameType(f.Method) {
	case larkws.FrameTypeControl:
		if hs.GetString(larkws.HeaderType) == string(larkws.MessageTypePong) && len(f.Payload) > 0 {
			var cc larkws.ClientConfig
			if err := json.Unmarshal(f.Payload, &cc); err != nil {
				h.c.log.Warn("feishu long connection: bad client config in pong", "err", err)
				return nil
			}
			h.onConfig(&cc)
		}
	case larkws.FrameTypeData:
		payload, ok := h.parts.add(&f, hs, time.Now())
		if !ok {
			return nil
		}
		return h.c.answerFrame(h.ctx, h.w, &f, hs, payload, h.d)
	}
	return nil
}

// answerFrame hands a complete event to the dispatcher and acknowledges it on the frame that
// completed it, with the handling time in biz_rt. Cards (interactive callbacks) are not used.
func (c *Channel) answerFrame(ctx context.Context, k frameWriter, f *larkws.Frame, hs larkws.Headers, payload []byte, d *dispatcher.EventDispatcher) error {
	if hs.GetString(larkws.HeaderType) != string(larkws.MessageTypeEvent) {
		return nil
	}
	start := time.Now()
	code := http.StatusOK
	if err := c.dispatchEvent(ctx, d, payload); err != nil {
		c.log.Warn("feishu event not handled", "message_id", hs.GetString(larkws.HeaderMessageID), "err", err)
		code = http.StatusInternalServerError
	}
	hs.Add(larkws.HeaderBizRt, strconv.FormatInt(time.Since(start).Milliseconds(), 10))
	body, _ := json.Marshal(larkws.NewResponseByCode(code))
	ack := larkws.Frame{SeqID: f.SeqID, LogID: f.LogID, Service: f.Service, Method: f.Method, Headers: hs, Payload: body}
	if err := k.write(&ack); err != nil {
		return fmt.Errorf("write ack: %w", err)
	}
	return nil
}

// dispatchEvent runs the SDK's dispatcher on one event; a panic in decoding or a handler becomes an
// error (and a 500 ack, so Feishu pushes the event again) instead of ending the read loop.
func (c *Channel) dispatchEvent(ctx context.Context, d *dispatcher.EventDispatcher, payload []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	_, err = d.Do(ctx, payload)
	return err
}

// reassembly joins payloads Feishu splits over several data frames (headers sum, seq and the
// shared message_id). It belongs to the one read loop, so it needs no lock.
type reassembly struct {
	pending map[string]*partial
	// dropped hears of every frame or payload that is given up, and why; nil ignores them.
	dropped func(messageID, why string)
}

type partial struct {
	parts   [][]byte
	got     int
	bytes   int
	expires time.Time
}

func newReassembly(dropped func(messageID, why string)) *reassembly {
	if dropped == nil {
		dropped = func(string, string) {}
	}
	return &reassembly{pending: map[string]*partial{}, dropped: dropped}
}

// add takes one data frame and returns the payload once every part is in. A frame outside the
// bounds (sum, seq, size) is dropped; an incomplete payload is forgotten after partsTTL.
func (r *reassembly) add(f *larkws.Frame, hs larkws.Headers, now time.Time) ([]byte, bool) {
	sum, seq := hs.GetInt(larkws.HeaderSum), hs.GetInt(larkws.HeaderSeq)
	if sum <= 1 {
		return f.Payload, true
	}
	for id, p := range r.pending {
		if now.After(p.expires) {
			delete(r.pending, id)
			r.dropped(id, fmt.Sprintf("incomplete after %s: %d of %d parts", partsTTL, p.got, len(p.parts)))
		}
	}
	id := hs.GetString(larkws.HeaderMessageID)
	if sum > maxFrameParts || seq < 0 || seq >= sum {
		r.dropped(id, fmt.Sprintf("part %d of %d is outside the bounds (at most %d parts)", seq, sum, maxFrameParts))
		return nil, false
	}
	p := r.pending[id]
	if p == nil || len(p.parts) != sum {
		p = &partial{parts: make([][]byte, sum)}
		r.pending[id] = p
	}
	p.expires = now.Add(partsTTL)
	if p.parts[seq] == nil {
		p.got++
	} else {
		p.bytes -= len(p.parts[seq]) // a repeated part replaces the earlier copy
	}
	p.parts[seq] = append([]byte{}, f.Payload...)
	p.bytes += len(f.Payload)
	if p.bytes > maxPayloadBytes {
		delete(r.pending, id)
		r.dropped(id, fmt.Sprintf("payload over %d bytes", maxPayloadBytes))
		return nil, false
	}
	if p.got < sum {
		return nil, false
	}
	delete(r.pending, id)
	return bytes.Join(p.parts, nil), true
}

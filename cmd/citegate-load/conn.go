package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// frame is the part of a server frame the load generator reads (DESIGN §5).
type frame struct {
	Type          string `json:"type"`
	SessionID     string `json:"sessionId"`
	RunID         string `json:"runId"`
	ClientMsgID   string `json:"clientMsgId"`
	UserMessageID uint64 `json:"userMessageId"`
	MessageID     uint64 `json:"messageId"`
	Phase         string `json:"phase"`
	Error         string `json:"error"`
	Code          string `json:"code"`
	Message       string `json:"message"`
}

// Frames that only stream progress are counted, not decoded: at a thousand turns a second they are
// most of the traffic, and the load generator shares the machine with the server it measures.
var streamPrefixes = [][]byte{
	[]byte(`{"type":"answer.delta"`),
	[]byte(`{"type":"tool.started"`),
	[]byte(`{"type":"tool.finished"`),
}

// conn is one websocket connection carrying any number of sessions. Its reader routes each frame
// to the session it concerns: by clientMsgId while a turn waits for its session.created or an
// error, by sessionId otherwise.
type conn struct {
	ws  *websocket.Conn
	wmu sync.Mutex // one writer at a time (gorilla's rule)

	mu        sync.Mutex
	bySession map[string]*session
	byClient  map[string]*session
	lost      error // set once the reader stopped

	streamed atomic.Int64 // progress frames received
	dropped  atomic.Int64 // frames a session could not take (its buffer full)
	done     chan struct{}
}

func dial(ctx context.Context, cfg config) (*conn, error) {
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 16 << 10, WriteBufferSize: 4 << 10}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+cfg.token)
	ws, resp, err := d.DialContext(ctx, wsURL(cfg.url), h)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("websocket %s: HTTP %d: %w", wsURL(cfg.url), resp.StatusCode, err)
		}
		return nil, fmt.Errorf("websocket %s: %w", wsURL(cfg.url), err)
	}
	ws.SetReadLimit(64 << 20)
	c := &conn{ws: ws, bySession: map[string]*session{}, byClient: map[string]*session{}, done: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *conn) close() {
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "load done"), time.Now().Add(time.Second))
	c.wmu.Unlock()
	_ = c.ws.Close()
	<-c.done
}

// read is the connection's one reader; when it stops, every session on it learns why.
func (c *conn) read() {
	defer close(c.done)
	var err error
	for {
		var data []byte
		_, data, err = c.ws.ReadMessage()
		if err != nil {
			break
		}
		if isStream(data) {
			c.streamed.Add(1)
			continue
		}
		var f frame
		if json.Unmarshal(data, &f) != nil {
			continue // not ours to judge; the server's own tests check its frames
		}
		c.route(f)
	}
	c.mu.Lock()
	c.lost = fmt.Errorf("%w: %w", errConnLost, err)
	sessions := make([]*session, 0, len(c.bySession)+len(c.byClient))
	for _, s := range c.bySession {
		sessions = append(sessions, s)
	}
	for _, s := range c.byClient {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	for _, s := range sessions {
		s.deliver(frame{Type: "connection.lost", Message: err.Error()})
	}
}

func isStream(data []byte) bool {
	for _, p := range streamPrefixes {
		if bytes.HasPrefix(data, p) {
			return true
		}
	}
	return false
}

func (c *conn) route(f frame) {
	c.mu.Lock()
	var s *session
	if f.ClientMsgID != "" {
		s = c.byClient[f.ClientMsgID]
	}
	if s == nil && f.SessionID != "" {
		s = c.bySession[f.SessionID]
	}
	if s != nil && f.Type == "session.created" && f.SessionID != "" {
		// Registered here, before the next frame is read, so the run's frames that follow find it.
		c.bySession[f.SessionID] = s
	}
	c.mu.Unlock()
	if s != nil {
		s.deliver(f)
	}
}

// send writes one client frame.
func (c *conn) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

// session is one conversation driven turn after turn.
type session struct {
	c      *conn
	id     string // empty until the first turn created it
	events chan frame
	seq    int
	name   string // prefix of its clientMsgIds
}

func newSession(c *conn, n int) *session {
	return &session{c: c, events: make(chan frame, 256), name: "load-" + strconv.Itoa(n)}
}

func (s *session) deliver(f frame) {
	select {
	case s.events <- f:
	default:
		s.c.dropped.Add(1)
	}
}

// turnResult is what one turn did.
type turnResult struct {
	sent, finished time.Time
	err            error  // no run.finished (error frame, timeout, connection lost)
	phase          string // run.finished's phase
	runErr         string // run.finished's error, when the run did not complete
	userMsg        uint64 // run.started's userMessageId
	answerMsg      uint64 // answer.final's messageId
}

func (r turnResult) completed() bool { return r.err == nil && r.phase == "COMPLETED" }

// errConnLost marks a turn whose connection closed under it.
var errConnLost = errors.New("connection lost")

// errTurnTimeout marks a turn that did not finish within --turn-timeout.
var errTurnTimeout = errors.New("no run.finished within the turn timeout")

// turn sends text and waits for the run it started to finish.
func (s *session) turn(ctx context.Context, text string, timeout time.Duration) turnResult {
	s.seq++
	cid := s.name + "-" + strconv.Itoa(s.seq)
	c := s.c
	c.mu.Lock()
	if c.lost != nil {
		err := c.lost
		c.mu.Unlock()
		return turnResult{sent: time.Now(), finished: time.Now(), err: err}
	}
	c.byClient[cid] = s
	if s.id != "" {
		c.bySession[s.id] = s
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.byClient, cid)
		c.mu.Unlock()
	}()
	msg := map[string]string{"type": "chat.send", "text": text, "clientMsgId": cid}
	if s.id != "" {
		msg["sessionId"] = s.id
	}
	res := turnResult{sent: time.Now()}
	if err := c.send(msg); err != nil {
		res.finished, res.err = time.Now(), fmt.Errorf("send: %w", err)
		return res
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	runID := ""
	for {
		select {
		case <-ctx.Done():
			res.finished, res.err = time.Now(), ctx.Err()
			return res
		case <-timer.C:
			res.finished, res.err = time.Now(), errTurnTimeout
			return res
		case f := <-s.events:
			switch f.Type {
			case "connection.lost":
				res.finished, res.err = time.Now(), fmt.Errorf("%w: %s", errConnLost, f.Message)
				return res
			case "error":
				if f.ClientMsgID == cid {
					res.finished, res.err = time.Now(), fmt.Errorf("error frame %s: %s", f.Code, f.Message)
					return res
				}
			case "session.created":
				if f.ClientMsgID == cid {
					s.id = f.SessionID
				}
			case "run.started":
				// One turn at a time per session, and the agent runs a session's turns in order: the
				// first run that starts after the send is ours. (Only a turn that timed out before
				// its own run started could be mistaken for it; that is already counted as an error.)
				if runID == "" {
					runID, res.userMsg = f.RunID, f.UserMessageID
				}
			case "answer.final":
				if f.RunID == runID {
					res.answerMsg = f.MessageID
				}
			case "run.finished":
				if f.RunID == runID && runID != "" {
					res.finished, res.phase, res.runErr = time.Now(), f.Phase, f.Error
					return res
				}
			}
		}
	}
}

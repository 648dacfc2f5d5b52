package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// Frames that only show progress are counted, not decoded: no turn waits for them, and at a
// thousand turns a second the load generator must not cost the machine it measures more than it
// has to. Every frame's type is read (for the per-type counts); the frames a turn waits for are
// scanned for their ids only (scanFrame).
var progressTypes = map[string]bool{
	"answer.delta":  true,
	"answer.html":   true,
	"tool.started":  true,
	"tool.finished": true,
}

// streamTypes are the frames StreamFrames counts (answer text and tool lines).
var streamTypes = map[string]bool{"answer.delta": true, "tool.started": true, "tool.finished": true}

// frameTypes are the server frame types counted one by one in the report.
var frameTypes = [...]string{"session.created", "run.started", "tool.started", "tool.finished", "answer.delta",
	"answer.html", "answer.final", "citations", "run.finished", "error"}

var typeIndex = func() map[string]int {
	m := make(map[string]int, len(frameTypes))
	for i, t := range frameTypes {
		m[t] = i
	}
	return m
}()

// frameCounts is a snapshot of the frames received, by type ("other" for the rest).
type frameCounts map[string]int64

// counts returns the connection's frame counts so far.
func (c *conn) counts() frameCounts {
	out := frameCounts{}
	for i := range c.types {
		name := "other"
		if i < len(frameTypes) {
			name = frameTypes[i]
		}
		if n := c.types[i].Load(); n > 0 {
			out[name] = n
		}
	}
	return out
}

// typePrefix is how the server starts every frame (wsFrame's first field).
var typePrefix = []byte(`{"type":"`)

// frameType returns the frame's type without decoding it: from the prefix every server frame
// starts with, or by scanning a frame written otherwise. The result may alias data.
func frameType(data []byte) []byte {
	if rest, ok := bytes.CutPrefix(data, typePrefix); ok {
		if end := bytes.IndexByte(rest, '"'); end >= 0 && bytes.IndexByte(rest[:end], '\\') < 0 {
			return rest[:end]
		}
	}
	var f frame
	if scanFrame(data, &f) != nil {
		return nil
	}
	return []byte(f.Type)
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

	streamed atomic.Int64 // answer text and tool frames received
	dropped  atomic.Int64 // frames a session could not take (its buffer full)
	// types counts the frames received by type (the index in frameTypes; the last counts the rest).
	types [len(frameTypes) + 1]atomic.Int64
	done  chan struct{}
	once  sync.Once
}

func dial(ctx context.Context, cfg config, token string) (*conn, error) {
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 16 << 10, WriteBufferSize: 4 << 10}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
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
	c.once.Do(func() {
		c.wmu.Lock()
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "load done"), time.Now().Add(time.Second))
		c.wmu.Unlock()
		_ = c.ws.Close()
	})
	<-c.done
}

// read is the connection's one reader; when it stops, every session on it learns why. Frames are
// read into one reused buffer.
func (c *conn) read() {
	defer close(c.done)
	var err error
	var buf bytes.Buffer
	for {
		var r io.Reader
		if _, r, err = c.ws.NextReader(); err != nil {
			break
		}
		buf.Reset()
		if _, err = buf.ReadFrom(r); err != nil {
			break
		}
		data := buf.Bytes()
		typ := frameType(data)
		if i, ok := typeIndex[string(typ)]; ok { // a lookup by converted bytes does not allocate
			c.types[i].Add(1)
		} else {
			c.types[len(frameTypes)].Add(1)
		}
		if progressTypes[string(typ)] {
			if streamTypes[string(typ)] {
				c.streamed.Add(1)
			}
			continue
		}
		var f frame
		if scanFrame(data, &f) != nil {
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

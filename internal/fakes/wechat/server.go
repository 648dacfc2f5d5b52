// Package wechatfake is a loopback fake of the WeChat Official Account platform for tests: an API
// server (access token, customer-service send, typing) that records every request and can inject
// errors, and an inbound client that pushes signed — optionally AES-encrypted — XML messages to a
// webhook the way WeChat does, including its re-sends of the same request.
package wechatfake

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
)

// API paths the fake serves.
const (
	PathToken  = "/cgi-bin/token"
	PathSend   = "/cgi-bin/message/custom/send"
	PathTyping = "/cgi-bin/message/custom/typing"
)

// Request is one recorded API request. Query and Body are as received.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Body   []byte
}

// TextMessage is one accepted customer-service text message.
type TextMessage struct {
	ToUser  string
	Content string
}

// TypingCommand is one accepted typing request ("Typing" or "CancelTyping").
type TypingCommand struct {
	ToUser  string
	Command string
}

type injected struct {
	code int
	msg  string
}

// Server fakes api.weixin.qq.com for one app. Create it with NewServer and Close it after the test.
type Server struct {
	URL       string
	AppID     string
	AppSecret string
	// TokenTTL is the expires_in of issued tokens, in seconds (WeChat: 7200).
	TokenTTL int
	// MaxContentBytes rejects longer texts with 45002 (content too long). WeChat's limit is
	// undocumented; the fake assumes 2048 bytes, as community reports do.
	MaxContentBytes int

	srv *httptest.Server

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever something is recorded
	seq      int
	tokens   map[string]bool // issued token → still valid
	fetches  int
	requests []Request
	messages []TextMessage
	typing   []TypingCommand
	inject   map[string][]injected
}

// NewServer starts the fake on a loopback port.
func NewServer(appID, appSecret string) *Server {
	s := &Server{
		AppID: appID, AppSecret: appSecret, TokenTTL: 7200, MaxContentBytes: 2048,
		changed: make(chan struct{}),
		tokens:  map[string]bool{},
		inject:  map[string][]injected{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc(PathToken, s.handleToken)
	mux.HandleFunc(PathSend, s.handleSend)
	mux.HandleFunc(PathTyping, s.handleTyping)
	s.srv = httptest.NewServer(s.record(mux))
	s.URL = s.srv.URL
	return s
}

// Close stops the fake.
func (s *Server) Close() { s.srv.Close() }

// InjectError makes the next times requests to path (PathToken, PathSend, PathTyping) answer
// errcode code instead of being served. Injected answers are recorded as requests but not as
// messages.
func (s *Server) InjectError(path string, code int, msg string, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range times {
		s.inject[path] = append(s.inject[path], injected{code, msg})
	}
}

// ExpireTokens invalidates every token issued so far, as when another process fetched a new token
// for the same app: their next use answers 40001.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.tokens {
		s.tokens[k] = false
	}
}

// TokenFetches counts successful token requests.
func (s *Server) TokenFetches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

// Requests returns a copy of every request received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Messages returns the accepted text messages, in order.
func (s *Server) Messages() []TextMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]TextMessage(nil), s.messages...)
}

// Typing returns the accepted typing commands, in order.
func (s *Server) Typing() []TypingCommand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]TypingCommand(nil), s.typing...)
}

// WaitMessages waits until at least n text messages were accepted, or ctx ends; it returns the
// messages so far either way, and ctx's error when it ended first.
func (s *Server) WaitMessages(ctx context.Context, n int) ([]TextMessage, error) {
	for {
		s.mu.Lock()
		msgs, ch := append([]TextMessage(nil), s.messages...), s.changed
		s.mu.Unlock()
		if len(msgs) >= n {
			return msgs, nil
		}
		select {
		case <-ctx.Done():
			return msgs, ctx.Err()
		case <-ch:
		}
	}
}

// notifyLocked wakes WaitMessages callers.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// record stores every request before it is served, so tests can inspect every byte sent.
func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Body: body})
		s.notifyLocked()
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// takeInjectedLocked pops an injected error for path, if any.
func (s *Server) takeInjectedLocked(path string) (injected, bool) {
	q := s.inject[path]
	if len(q) == 0 {
		return injected{}, false
	}
	s.inject[path] = q[1:]
	return q[0], true
}

func writeJSON(w http.ResponseWriter, v any) {
	// WeChat answers errors with HTTP 200 and an errcode in the body.
	w.Header().Set("Content-Type", "application/json; encoding=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, map[string]any{"errcode": code, "errmsg": msg})
}

func (s *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method != http.MethodGet {
		writeErr(w, 43001, "require GET method")
		return
	}
	if inj, ok := s.takeInjectedLocked(PathToken); ok {
		writeErr(w, inj.code, inj.msg)
		return
	}
	q := r.URL.Query()
	switch {
	case q.Get("grant_type") != "client_credential":
		writeErr(w, 40002, "invalid grant_type")
	case q.Get("appid") != s.AppID:
		writeErr(w, 40013, "invalid appid")
	case q.Get("secret") != s.AppSecret:
		writeErr(w, 40125, "invalid appsecret")
	default:
		s.seq++
		tok := fmt.Sprintf("TOKEN-%d-%s", s.seq, randomHex(8))
		s.tokens[tok] = true
		s.fetches++
		writeJSON(w, map[string]any{"access_token": tok, "expires_in": s.TokenTTL})
	}
}

// checkTokenLocked answers WeChat's errors for a missing or invalid access_token.
func (s *Server) checkTokenLocked(w http.ResponseWriter, r *http.Request) bool {
	tok := r.URL.Query().Get("access_token")
	if tok == "" {
		writeErr(w, 41001, "access_token missing")
		return false
	}
	if !s.tokens[tok] {
		writeErr(w, 40001, "invalid credential, access_token is invalid or not latest")
		return false
	}
	return true
}

// acceptPostLocked is what every authenticated API endpoint checks first, in WeChat's order: the
// method, an injected error for the path, the access token. It writes the error reply and reports
// false when the request stops there.
func (s *Server) acceptPostLocked(w http.ResponseWriter, r *http.Request, path string) bool {
	if r.Method != http.MethodPost {
		writeErr(w, 43002, "require POST method")
		return false
	}
	if inj, ok := s.takeInjectedLocked(path); ok {
		writeErr(w, inj.code, inj.msg)
		return false
	}
	return s.checkTokenLocked(w, r)
}

func (s *Server) handleSend(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.acceptPostLocked(w, r, PathSend) {
		return
	}
	var m struct {
		ToUser  string `json:"touser"`
		MsgType string `json:"msgtype"`
		Text    *struct {
			Content string `json:"content"`
		} `json:"text"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &m); err != nil {
		writeErr(w, 47001, "data format error")
		return
	}
	switch {
	case m.ToUser == "":
		writeErr(w, 40003, "invalid openid")
	case m.MsgType != "text" || m.Text == nil:
		writeErr(w, 40008, "invalid message type")
	case m.Text.Content == "":
		writeErr(w, 44003, "empty news data")
	case s.MaxContentBytes > 0 && len(m.Text.Content) > s.MaxContentBytes:
		writeErr(w, 45002, "content size out of limit")
	default:
		s.messages = append(s.messages, TextMessage{ToUser: m.ToUser, Content: m.Text.Content})
		s.notifyLocked()
		writeErr(w, 0, "ok")
	}
}

func (s *Server) handleTyping(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.acceptPostLocked(w, r, PathTyping) {
		return
	}
	var m struct {
		ToUser  string `json:"touser"`
		Command string `json:"command"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &m); err != nil {
		writeErr(w, 47001, "data format error")
		return
	}
	if m.ToUser == "" {
		writeErr(w, 40003, "invalid openid")
		return
	}
	if m.Command != "Typing" && m.Command != "CancelTyping" {
		writeErr(w, 47001, "data format error: invalid command")
		return
	}
	s.typing = append(s.typing, TypingCommand{ToUser: m.ToUser, Command: m.Command})
	s.notifyLocked()
	writeErr(w, 0, "ok")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

package feishufake

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
)

// Mention is one @-mention inside a message.
type Mention struct {
	Key    string // "@_user_1"
	OpenID string
	Name   string
}

// MessageEvent describes an im.message.receive_v1 event.
type MessageEvent struct {
	EventID      string // default "ev_" + MessageID
	MessageID    string
	ChatID       string
	ChatType     string // "p2p" (default) or "group"
	MessageType  string // "text" (default) or "post"
	Text         string // text messages: the text, mention keys included ("@_user_1 hi")
	Content      string // raw content JSON; overrides Text
	SenderOpenID string // default "ou_user"
	Mentions     []Mention
	Token        string // header.token (the verification token)
	AppID        string
}

// BotMention is the mention of the fake's bot under key.
func (s *Server) BotMention(key string) Mention {
	return Mention{Key: key, OpenID: s.opt.BotOpenID, Name: s.opt.BotName}
}

// JSON renders the event as Feishu sends it (schema 2.0).
func (e MessageEvent) JSON() []byte {
	if e.EventID == "" {
		e.EventID = "ev_" + e.MessageID
	}
	if e.ChatType == "" {
		e.ChatType = "p2p"
	}
	if e.MessageType == "" {
		e.MessageType = "text"
	}
	if e.SenderOpenID == "" {
		e.SenderOpenID = "ou_user"
	}
	content := e.Content
	if content == "" {
		b, _ := json.Marshal(map[string]string{"text": e.Text})
		content = string(b)
	}
	mentions := []map[string]any{}
	for _, m := range e.Mentions {
		mentions = append(mentions, map[string]any{
			"key": m.Key, "name": m.Name, "tenant_key": "tk_fake",
			"id": map[string]string{"open_id": m.OpenID, "union_id": "on_" + m.OpenID, "user_id": ""},
		})
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	b, _ := json.Marshal(map[string]any{
		"schema": "2.0",
		"header": map[string]any{
			"event_id": e.EventID, "event_type": "im.message.receive_v1", "create_time": now,
			"token": e.Token, "app_id": e.AppID, "tenant_key": "tk_fake",
		},
		"event": map[string]any{
			"sender": map[string]any{
				"sender_id":   map[string]string{"open_id": e.SenderOpenID, "union_id": "on_" + e.SenderOpenID, "user_id": "u_" + e.SenderOpenID},
				"sender_type": "user", "tenant_key": "tk_fake",
			},
			"message": map[string]any{
				"message_id": e.MessageID, "chat_id": e.ChatID, "chat_type": e.ChatType,
				"message_type": e.MessageType, "content": content, "mentions": mentions, "create_time": now,
			},
		},
	})
	return b
}

// ChallengeJSON is the URL-verification request Feishu sends when the webhook URL is saved.
func ChallengeJSON(token, challenge string) []byte {
	b, _ := json.Marshal(map[string]string{"challenge": challenge, "token": token, "type": "url_verification"})
	return b
}

// WebhookOptions controls how PostWebhook delivers an event.
type WebhookOptions struct {
	// EncryptKey, when set, sends {"encrypt": …} (AES-256-CBC, key sha256(EncryptKey)) with the
	// X-Lark-Signature headers. A URL-verification challenge is sent encrypted but unsigned, as the
	// platform does (captured requests carry no X-Lark-* headers; see larksuite/oapi-sdk-python#79).
	EncryptKey string
	// BadSignature sends a wrong signature.
	BadSignature bool
	// Unsigned leaves the signature headers out even for an event.
	Unsigned bool
	// Time is the request timestamp; zero means now.
	Time time.Time
	// Nonce is the request nonce; "" picks one.
	Nonce string
}

// IsChallenge reports whether a plaintext body is a URL-verification challenge.
func IsChallenge(plain []byte) bool {
	var v struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(plain, &v) == nil && v.Type == "url_verification"
}

// SignedHeaders returns the headers Feishu puts on an event push to an app with an encrypt key.
func SignedHeaders(encryptKey string, ts time.Time, nonce string, body []byte) http.Header {
	t := strconv.FormatInt(ts.Unix(), 10)
	return http.Header{
		"Content-Type":                  {"application/json; charset=utf-8"},
		larkevent.EventRequestTimestamp: {t},
		larkevent.EventRequestNonce:     {nonce},
		larkevent.EventSignature:        {larkevent.Signature(t, nonce, encryptKey, string(body))},
	}
}

// PostRaw POSTs body with hdr to url and returns the status and body of the answer.
func PostRaw(ctx context.Context, url string, body []byte, hdr http.Header) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("feishufake: webhook request: %w", err)
	}
	if hdr == nil {
		hdr = http.Header{}
	}
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("feishufake: webhook post: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Encrypt encrypts plain as Feishu does for an app with an encrypt key.
func Encrypt(plain []byte, key string) (string, error) {
	k := sha256.Sum256([]byte(key))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return "", fmt.Errorf("feishufake: cipher: %w", err)
	}
	pad := aes.BlockSize - len(plain)%aes.BlockSize
	buf := make([]byte, aes.BlockSize+len(plain)+pad)
	iv := buf[:aes.BlockSize]
	if _, err := rand.Read(iv); err != nil {
		return "", fmt.Errorf("feishufake: iv: %w", err)
	}
	copy(buf[aes.BlockSize:], plain)
	for i := len(plain) + aes.BlockSize; i < len(buf); i++ {
		buf[i] = byte(pad)
	}
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(buf[aes.BlockSize:], buf[aes.BlockSize:])
	return base64.StdEncoding.EncodeToString(buf), nil
}

// PostWebhook POSTs event to url as Feishu's event push does and returns the status and body.
func PostWebhook(ctx context.Context, url string, event []byte, opt WebhookOptions) (int, []byte, error) {
	body := event
	hdr := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	if opt.EncryptKey != "" {
		enc, err := Encrypt(event, opt.EncryptKey)
		if err != nil {
			return 0, nil, err
		}
		body, _ = json.Marshal(map[string]string{"encrypt": enc})
		if !opt.Unsigned && !IsChallenge(event) {
			ts := opt.Time
			if ts.IsZero() {
				ts = time.Now()
			}
			nonce := opt.Nonce
			if nonce == "" {
				nonce = "nonce" + strconv.FormatInt(ts.UnixNano(), 36)
			}
			key := opt.EncryptKey
			if opt.BadSignature {
				key = "wrong-key"
			}
			hdr = SignedHeaders(key, ts, nonce, body)
		}
	}
	return PostRaw(ctx, url, body, hdr)
}

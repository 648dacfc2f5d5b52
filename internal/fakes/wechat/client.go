package wechatfake

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Client pushes messages to a webhook as WeChat's servers do. Signing and encryption are written
// here from the protocol description, independently of the SDK the gateway uses to check them.
type Client struct {
	URL            string // the gateway's webhook, e.g. http://127.0.0.1:port/channels/wechat
	Token          string
	AppID          string
	EncodingAESKey string // needed for Delivery.Safe
	// Account is the ToUserName of pushed messages (the official account's original id).
	Account string
	HTTP    *http.Client
}

// Delivery says how a push is made.
type Delivery struct {
	// Safe encrypts the message (encrypt_type=aes, msg_signature).
	Safe bool
	// BadSignature signs with a wrong token.
	BadSignature bool
	// Attempts is how many times the same request (same query, same body) is sent. WeChat sends it
	// up to 3 times in all when the gateway does not answer within 5 seconds. 0 means 1.
	Attempts int
	// Always re-sends even after an answer, as WeChat does when its own 5 s timer fired first;
	// without it the client stops at the first 200 that arrived within Timeout.
	Always bool
	// Timeout per attempt; 0 means WeChat's 5 seconds.
	Timeout time.Duration
	// Timestamp and Nonce replace the query values WeChat would pick (the current time and a fresh
	// nonce); the request is signed over them. Tests use them for stale clocks and replays.
	Timestamp, Nonce string
}

// Response is the gateway's answer to one attempt.
type Response struct {
	Status int
	Body   string
	// Plain is the decrypted reply XML of a safe-mode passive reply, else Body.
	Plain string
	Err   error // transport error or timeout of this attempt
}

// NewAESKey returns a random 43-character EncodingAESKey.
func NewAESKey() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return strings.TrimRight(base64.StdEncoding.EncodeToString(k), "=")
}

// Sign is WeChat's signature: sha1 of the sorted, concatenated parts, in hex.
func Sign(parts ...string) string {
	p := append([]string(nil), parts...)
	sort.Strings(p)
	h := sha1.Sum([]byte(strings.Join(p, "")))
	return hex.EncodeToString(h[:])
}

// cdata wraps s in CDATA sections; "]]>" inside s is split across two sections.
func cdata(s string) string {
	return "<![CDATA[" + strings.ReplaceAll(s, "]]>", "]]]]><![CDATA[>") + "]]>"
}

// TextXML builds a text message push.
func (c *Client) TextXML(openID, content string, msgID int64, created time.Time) []byte {
	return []byte(fmt.Sprintf("<xml><ToUserName>%s</ToUserName><FromUserName>%s</FromUserName><CreateTime>%d</CreateTime><MsgType>%s</MsgType><Content>%s</Content><MsgId>%d</MsgId></xml>",
		cdata(c.account()), cdata(openID), created.Unix(), cdata("text"), cdata(content), msgID))
}

// ImageXML builds an image message push.
func (c *Client) ImageXML(openID string, msgID int64, created time.Time) []byte {
	return []byte(fmt.Sprintf("<xml><ToUserName>%s</ToUserName><FromUserName>%s</FromUserName><CreateTime>%d</CreateTime><MsgType>%s</MsgType><PicUrl>%s</PicUrl><MediaId>%s</MediaId><MsgId>%d</MsgId></xml>",
		cdata(c.account()), cdata(openID), created.Unix(), cdata("image"), cdata("http://127.0.0.1/pic.jpg"), cdata("media1"), msgID))
}

// VoiceXML builds a voice message push; recognition is WeChat's transcript ("" when speech
// recognition is off, in which case the element is left out as WeChat does).
func (c *Client) VoiceXML(openID, recognition string, msgID int64, created time.Time) []byte {
	rec := ""
	if recognition != "" {
		rec = "<Recognition>" + cdata(recognition) + "</Recognition>"
	}
	return []byte(fmt.Sprintf("<xml><ToUserName>%s</ToUserName><FromUserName>%s</FromUserName><CreateTime>%d</CreateTime><MsgType>%s</MsgType><MediaId>%s</MediaId><Format>%s</Format>%s<MsgId>%d</MsgId></xml>",
		cdata(c.account()), cdata(openID), created.Unix(), cdata("voice"), cdata("media2"), cdata("amr"), rec, msgID))
}

// EventXML builds an event push (subscribe, CLICK, …).
func (c *Client) EventXML(openID, event string, created time.Time) []byte {
	return []byte(fmt.Sprintf("<xml><ToUserName>%s</ToUserName><FromUserName>%s</FromUserName><CreateTime>%d</CreateTime><MsgType>%s</MsgType><Event>%s</Event></xml>",
		cdata(c.account()), cdata(openID), created.Unix(), cdata("event"), cdata(event)))
}

func (c *Client) account() string {
	if c.Account == "" {
		return "gh_fakeaccount"
	}
	return c.Account
}

// SendText pushes a text message from openID.
func (c *Client) SendText(ctx context.Context, openID, content string, msgID int64, d Delivery) ([]Response, error) {
	return c.Deliver(ctx, openID, c.TextXML(openID, content, msgID, time.Now()), d)
}

// Verify performs the URL check WeChat makes when the server address is saved: a signed GET with
// echostr, which the gateway must echo.
func (c *Client) Verify(ctx context.Context, echostr string, badSignature bool) (Response, error) {
	q := c.signedQuery(badSignature, "", "")
	q.Set("echostr", echostr)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"?"+q.Encode(), nil)
	if err != nil {
		return Response{}, fmt.Errorf("wechatfake: verify: %w", err)
	}
	return c.do(req), nil
}

// nonceSeq makes nonces unique within the process even when two pushes share a clock reading.
var nonceSeq atomic.Int64

func (c *Client) signedQuery(bad bool, ts, nonce string) url.Values {
	if ts == "" {
		ts = strconv.FormatInt(time.Now().Unix(), 10)
	}
	if nonce == "" {
		nonce = strconv.FormatInt(time.Now().UnixNano()%1e9, 10) + strconv.FormatInt(nonceSeq.Add(1), 10)
	}
	tok := c.Token
	if bad {
		tok += "-wrong"
	}
	return url.Values{"timestamp": {ts}, "nonce": {nonce}, "signature": {Sign(tok, ts, nonce)}}
}

// Deliver pushes one message XML from openID, encrypted when d.Safe, and re-sends the identical
// request as d says. It returns one Response per attempt made.
func (c *Client) Deliver(ctx context.Context, openID string, msgXML []byte, d Delivery) ([]Response, error) {
	q := c.signedQuery(d.BadSignature, d.Timestamp, d.Nonce)
	q.Set("openid", openID)
	body := msgXML
	if d.Safe {
		enc, err := c.encrypt(msgXML)
		if err != nil {
			return nil, err
		}
		tok := c.Token
		if d.BadSignature {
			tok += "-wrong"
		}
		q.Set("encrypt_type", "aes")
		q.Set("msg_signature", Sign(tok, q.Get("timestamp"), q.Get("nonce"), enc))
		body = []byte(fmt.Sprintf("<xml><ToUserName>%s</ToUserName><Encrypt>%s</Encrypt></xml>", cdata(c.account()), cdata(enc)))
	}
	attempts := max(d.Attempts, 1)
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	var out []Response
	for range attempts {
		actx, cancel := context.WithTimeout(ctx, timeout)
		req, err := http.NewRequestWithContext(actx, http.MethodPost, c.URL+"?"+q.Encode(), bytes.NewReader(body))
		if err != nil {
			cancel()
			return out, fmt.Errorf("wechatfake: deliver: %w", err)
		}
		req.Header.Set("Content-Type", "text/xml")
		resp := c.do(req)
		cancel()
		if resp.Err == nil && d.Safe && strings.Contains(resp.Body, "<Encrypt>") {
			resp.Plain, resp.Err = c.decryptReply(resp.Body)
		}
		out = append(out, resp)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if !d.Always && resp.Err == nil && resp.Status == http.StatusOK {
			break
		}
	}
	return out, nil
}

func (c *Client) do(req *http.Request) Response {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Response{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Body: string(b), Plain: string(b), Err: err}
}

func (c *Client) aesKey() ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(c.EncodingAESKey + "=")
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("wechatfake: bad EncodingAESKey")
	}
	return k, nil
}

// encrypt builds WeChat's envelope: AES-256-CBC (IV = key[:16]) over
// random(16) ‖ len(xml) big-endian uint32 ‖ xml ‖ appid, PKCS#7-padded to 32 bytes, base64.
func (c *Client) encrypt(msg []byte) (string, error) {
	key, err := c.aesKey()
	if err != nil {
		return "", err
	}
	var plain bytes.Buffer
	random := make([]byte, 16)
	_, _ = rand.Read(random)
	plain.Write(random)
	_ = binary.Write(&plain, binary.BigEndian, uint32(len(msg)))
	plain.Write(msg)
	plain.WriteString(c.AppID)
	pad := 32 - plain.Len()%32
	plain.Write(bytes.Repeat([]byte{byte(pad)}, pad))
	block, err := aes.NewCipher(key)
	if err != nil {
		return "", fmt.Errorf("wechatfake: %w", err)
	}
	ct := plain.Bytes()
	cipher.NewCBCEncrypter(block, key[:16]).CryptBlocks(ct, ct)
	return base64.StdEncoding.EncodeToString(ct), nil
}

// decryptReply checks and opens an encrypted passive reply.
func (c *Client) decryptReply(body string) (string, error) {
	var env struct {
		Encrypt      string `xml:"Encrypt"`
		MsgSignature string `xml:"MsgSignature"`
		TimeStamp    string `xml:"TimeStamp"`
		Nonce        string `xml:"Nonce"`
	}
	if err := xml.Unmarshal([]byte(body), &env); err != nil {
		return "", fmt.Errorf("wechatfake: reply envelope: %w", err)
	}
	if env.MsgSignature != Sign(c.Token, env.TimeStamp, env.Nonce, env.Encrypt) {
		return "", errors.New("wechatfake: reply msg_signature mismatch")
	}
	key, err := c.aesKey()
	if err != nil {
		return "", err
	}
	ct, err := base64.StdEncoding.DecodeString(env.Encrypt)
	if err != nil || len(ct) == 0 || len(ct)%aes.BlockSize != 0 {
		return "", errors.New("wechatfake: reply ciphertext malformed")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return "", fmt.Errorf("wechatfake: %w", err)
	}
	cipher.NewCBCDecrypter(block, key[:16]).CryptBlocks(ct, ct)
	pad := int(ct[len(ct)-1])
	if pad < 1 || pad > 32 || pad > len(ct) {
		return "", errors.New("wechatfake: reply padding malformed")
	}
	ct = ct[:len(ct)-pad]
	if len(ct) < 20 {
		return "", errors.New("wechatfake: reply too short")
	}
	n := int(binary.BigEndian.Uint32(ct[16:20]))
	if 20+n > len(ct) {
		return "", errors.New("wechatfake: reply length malformed")
	}
	if got := string(ct[20+n:]); got != c.AppID {
		return "", fmt.Errorf("wechatfake: reply appid %q", got)
	}
	return string(ct[20 : 20+n]), nil
}

package feishu

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
)

// TimestampWindow is how far X-Lark-Request-Timestamp may be from the server clock on a signed
// webhook request.
const TimestampWindow = 300 * time.Second

// maxChallengeCipher bounds the ciphertext of an unsigned URL-verification request. Feishu's
// challenge is about a hundred bytes of JSON; the bound leaves an attacker no room to splice
// captured ciphertext blocks into something the challenge path would echo.
const maxChallengeCipher = 512

// RejectBody is the one answer to every webhook request that is refused, whatever was wrong: a
// forged signature, a stale timestamp, a wrong token, an undecryptable or unparsable body, an
// oversize body. It never carries parser or decryption text, so the endpoint tells an attacker
// nothing about a ciphertext (no decryption oracle).
const RejectBody = `{"code":403,"msg":"request rejected"}`

// RejectStatus is the status of every refused webhook request.
const RejectStatus = http.StatusForbidden

// challengeValue is what a URL-verification challenge may look like to be echoed (Feishu sends a
// UUID or a short alphanumeric string).
var challengeValue = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// webhookRejected says why a request was refused, for the log only.
type webhookRejected struct{ why string }

func (e *webhookRejected) Error() string { return e.why }

func rejected(format string, args ...any) error {
	return &webhookRejected{why: fmt.Sprintf(format, args...)}
}

// newWebhookHandler serves Feishu's event pushes. The order matters: with an encrypt_key, the
// signature over the raw body and the timestamp window are checked before anything is decrypted
// or parsed; only then is the body opened (by our own decryption, which cannot panic) and handed,
// as plaintext, to the SDK's dispatcher. The one exception is Feishu's URL-verification challenge,
// which the platform sends encrypted but unsigned: an unsigned request is decrypted only to answer
// that challenge, and anything that is not exactly a challenge carrying the right verification
// token gets the same rejection as a bad signature. Without an encrypt_key every request must carry
// the verification token.
func (c *Channel) newWebhookHandler() http.Handler {
	d := c.newEventDispatcher(c.cfg.VerificationToken, "")
	d.InitConfig(
		larkevent.WithLogger(newLarkLogger(c.log)),
		larkevent.WithLogLevel(larkcore.LogLevelInfo),
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plain, challenge, err := c.admit(w, r)
		if err != nil {
			var rj *webhookRejected
			if errors.As(err, &rj) {
				c.log.Warn("feishu webhook request rejected: "+rj.why, "remote", r.RemoteAddr)
			} else {
				c.log.Warn("feishu webhook request rejected", "remote", r.RemoteAddr, "err", err)
			}
			writeReject(w)
			return
		}
		if challenge != "" {
			writeRaw(w, http.StatusOK, mustJSON(map[string]string{"challenge": challenge}))
			return
		}
		if h, _ := c.active(); h == nil {
			// Authentic, but the channel is stopped: Feishu re-delivers later.
			writeJSON(w, http.StatusServiceUnavailable, "channel not running")
			return
		}
		resp := d.Handle(r.Context(), &larkevent.EventReq{Header: r.Header, Body: plain, RequestURI: r.RequestURI})
		if resp == nil || resp.StatusCode != http.StatusOK {
			// Only authenticated requests get here (a handler error, an event type with no handler);
			// the SDK's error text stays in the log.
			status := 0
			var body []byte
			if resp != nil {
				status, body = resp.StatusCode, resp.Body
			}
			c.log.Error("feishu webhook event not handled", "status", status, "answer", string(body))
			writeJSON(w, http.StatusInternalServerError, "event not handled")
			return
		}
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(resp.Body)
	})
}

// admit decides whether a request comes from Feishu. It returns the plaintext event, or the
// challenge to echo, or a rejection.
func (c *Channel) admit(w http.ResponseWriter, r *http.Request) (plain []byte, challenge string, err error) {
	if r.Method != http.MethodPost {
		return nil, "", rejected("method %s", r.Method)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		return nil, "", rejected("body unreadable, too slow or too large: %v", err)
	}
	if c.cfg.EncryptKey == "" {
		return c.admitPlain(body)
	}
	ts := r.Header.Get(larkevent.EventRequestTimestamp)
	nonce := r.Header.Get(larkevent.EventRequestNonce)
	sig := r.Header.Get(larkevent.EventSignature)
	if ts == "" && nonce == "" && sig == "" {
		ch, err := c.unsignedChallenge(body)
		return nil, ch, err
	}
	want := larkevent.Signature(ts, nonce, c.cfg.EncryptKey, string(body))
	if subtle.ConstantTimeCompare([]byte(strings.ToLower(sig)), []byte(want)) != 1 {
		return nil, "", rejected("signature mismatch")
	}
	if !c.freshTimestamp(ts) {
		return nil, "", rejected("timestamp %q outside the accepted window", ts)
	}
	plain, err = c.openEnvelope(body, maxWebhookBody)
	if err != nil {
		return nil, "", err
	}
	token, isChallenge, err := tokenOf(plain)
	if err != nil {
		return nil, "", err
	}
	if !sameToken(token, c.cfg.VerificationToken) {
		return nil, "", rejected("verification token mismatch")
	}
	if isChallenge {
		ch, err := challengeOf(plain)
		return nil, ch, err
	}
	return plain, "", nil
}

// admitPlain checks an unencrypted request: its verification token must match. (The SDK checks the
// token only on the URL challenge.)
func (c *Channel) admitPlain(body []byte) ([]byte, string, error) {
	token, isChallenge, err := tokenOf(body)
	if err != nil {
		return nil, "", err
	}
	if !sameToken(token, c.cfg.VerificationToken) {
		return nil, "", rejected("verification token mismatch")
	}
	if isChallenge {
		ch, err := challengeOf(body)
		return nil, ch, err
	}
	return body, "", nil
}

// unsignedChallenge answers the one request Feishu sends without a signature: the encrypted
// URL-verification challenge. The ciphertext is small, must decrypt with valid padding to exactly
// {"challenge","token","type":"url_verification"} (no other field), the token must match and the
// challenge must look like one; any failure is the uniform rejection. So an unsigned request can
// learn only whether it is a well-formed challenge carrying the secret token.
func (c *Channel) unsignedChallenge(body []byte) (string, error) {
	plain, err := c.openEnvelope(body, maxChallengeCipher)
	if err != nil {
		return "", rejected("unsigned request: %v", err)
	}
	var ch struct {
		Challenge string `json:"challenge"`
		Token     string `json:"token"`
		Type      string `json:"type"`
	}
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ch); err != nil || dec.More() {
		return "", rejected("unsigned request that is not a URL-verification challenge")
	}
	if ch.Type != "url_verification" || !sameToken(ch.Token, c.cfg.VerificationToken) || !challengeValue.MatchString(ch.Challenge) {
		return "", rejected("unsigned request that is not a valid URL-verification challenge")
	}
	return ch.Challenge, nil
}

// openEnvelope takes {"encrypt":"…"} apart and decrypts it.
func (c *Channel) openEnvelope(body []byte, maxCipher int) ([]byte, error) {
	var env struct {
		Encrypt string `json:"encrypt"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Encrypt == "" {
		return nil, rejected("not an encrypted envelope")
	}
	if len(env.Encrypt) > maxCipher {
		return nil, rejected("ciphertext too long")
	}
	plain, err := decrypt(env.Encrypt, c.cfg.EncryptKey)
	if err != nil {
		return nil, rejected("%v", err)
	}
	return plain, nil
}

// decrypt is decryptEvent; a variable so that tests can count what gets decrypted.
var decrypt = decryptEvent

// decryptEvent opens Feishu's encryption: base64(IV ‖ AES-256-CBC(PKCS#7(plaintext))) with
// key = sha256(encrypt_key). Unlike the SDK's EventDecrypt, which slices between the first "{" and
// the last "}" and panics when they come in the other order, every length and the padding are
// checked, so no input can make it panic.
func decryptEvent(b64, encryptKey string) ([]byte, error) {
	buf, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("ciphertext is not base64")
	}
	if len(buf) < 2*aes.BlockSize || len(buf)%aes.BlockSize != 0 {
		return nil, errors.New("ciphertext length is not IV plus whole blocks")
	}
	key := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("cipher: %w", err)
	}
	out := make([]byte, len(buf)-aes.BlockSize)
	cipher.NewCBCDecrypter(block, buf[:aes.BlockSize]).CryptBlocks(out, buf[aes.BlockSize:])
	pad := int(out[len(out)-1])
	if pad < 1 || pad > aes.BlockSize {
		return nil, errors.New("bad padding")
	}
	bad := 0
	for _, b := range out[len(out)-pad:] {
		if int(b) != pad {
			bad++
		}
	}
	if bad != 0 {
		return nil, errors.New("bad padding")
	}
	return out[:len(out)-pad], nil
}

// tokenOf reads the verification token of a plaintext request (schema 2.0 header.token, or the
// top-level token of 1.0 events and the challenge) and whether it is a URL-verification challenge.
func tokenOf(plain []byte) (token string, challenge bool, err error) {
	var fuzzy larkevent.EventFuzzy
	if err := json.Unmarshal(plain, &fuzzy); err != nil {
		return "", false, rejected("body is not JSON")
	}
	if fuzzy.Encrypt != "" {
		return "", false, rejected("encrypted body but no encrypt_key configured")
	}
	token = fuzzy.Token
	if fuzzy.Header != nil {
		token = fuzzy.Header.Token
	}
	return token, fuzzy.Type == string(larkevent.ReqTypeChallenge), nil
}

func challengeOf(plain []byte) (string, error) {
	var ch struct {
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(plain, &ch); err != nil || !challengeValue.MatchString(ch.Challenge) {
		return "", rejected("malformed URL-verification challenge")
	}
	return ch.Challenge, nil
}

func sameToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// freshTimestamp reports whether ts (Unix seconds) is within TimestampWindow of the clock.
func (c *Channel) freshTimestamp(ts string) bool {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	d := c.now().Sub(time.Unix(sec, 0))
	return d <= TimestampWindow && d >= -TimestampWindow
}

func writeReject(w http.ResponseWriter) { writeRaw(w, RejectStatus, []byte(RejectBody)) }

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

package feishu

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	feishufake "github.com/citegate/citegate/internal/fakes/feishu"
	"github.com/citegate/citegate/internal/testkit"
)

const (
	testEncryptKey = "ekey-oracle-test"
	testToken      = "vtoken-oracle-test"
)

type countingHandler struct {
	mu   sync.Mutex
	msgs []channels.Message
}

func (h *countingHandler) HandleMessage(_ context.Context, m channels.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, m)
}

func (h *countingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// countDecryptions makes every decryption countable for the rest of the test.
func countDecryptions(t *testing.T) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	orig := decrypt
	decrypt = func(b64, key string) ([]byte, error) {
		n.Add(1)
		return orig(b64, key)
	}
	t.Cleanup(func() { decrypt = orig })
	return &n
}

type webhookEnv struct {
	url  string
	h    *countingHandler
	logs *testkit.SyncBuffer
	now  time.Time
}

// startWebhook runs a started webhook-mode channel (against the platform fake) whose clock reads
// now.
func startWebhook(t *testing.T, encryptKey string, now time.Time) *webhookEnv {
	t.Helper()
	fake := feishufake.New(feishufake.Options{})
	t.Cleanup(fake.Close)
	o := fake.Options()
	logs := &testkit.SyncBuffer{}
	ch, err := New(Config{
		AppID: o.AppID, AppSecret: o.AppSecret, BaseURL: fake.URL(), Mode: ModeWebhook,
		VerificationToken: testToken, EncryptKey: encryptKey,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:    func() time.Time { return now },
	})
	require.NoError(t, err)
	srv := httptest.NewServer(ch.Routes()[WebhookPath])
	t.Cleanup(srv.Close)
	h := &countingHandler{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, ch.Start(ctx, h))
	return &webhookEnv{url: srv.URL, h: h, logs: logs, now: now}
}

func (e *webhookEnv) post(t *testing.T, body []byte, hdr http.Header) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	status, got, err := feishufake.PostRaw(ctx, e.url, body, hdr)
	require.NoError(t, err)
	return status, string(got)
}

func eventJSON(id string) []byte {
	return feishufake.MessageEvent{MessageID: id, ChatID: "oc_1", Text: "机密内容 " + id, Token: testToken}.JSON()
}

func envelope(t *testing.T, plain []byte, key string) []byte {
	t.Helper()
	enc, err := feishufake.Encrypt(plain, key)
	require.NoError(t, err)
	b, err := json.Marshal(map[string]string{"encrypt": enc})
	require.NoError(t, err)
	return b
}

func envelopeRaw(ct []byte) []byte {
	b, _ := json.Marshal(map[string]string{"encrypt": base64.StdEncoding.EncodeToString(ct)})
	return b
}

// TestWebhookDecryptionOracle replays the attack of the report: a captured encrypted event is
// tampered with byte by byte and sent without a valid signature. Every request gets the same
// answer, nothing is decrypted and nothing is handed on.
func TestWebhookDecryptionOracle(t *testing.T) {
	now := time.Now()
	e := startWebhook(t, testEncryptKey, now)
	decrypted := countDecryptions(t)

	captured := envelope(t, eventJSON("om_captured"), testEncryptKey)
	capturedHdr := feishufake.SignedHeaders(testEncryptKey, now, "nonce-captured", captured)
	var env struct{ Encrypt string }
	require.NoError(t, json.Unmarshal(captured, &env))
	ct, err := base64.StdEncoding.DecodeString(env.Encrypt)
	require.NoError(t, err)
	require.Greater(t, len(env.Encrypt), maxChallengeCipher, "a message event is longer than any challenge")

	type attempt struct {
		name string
		body []byte
		hdr  http.Header
	}
	var attempts []attempt
	// Flip one bit in every byte of the IV and of the first and last blocks, as a padding or parser
	// oracle attack does; send each unsigned, with the captured headers, and with a forged signature.
	for i := range ct {
		if i >= 2*16 && i < len(ct)-16 {
			continue
		}
		tampered := bytes.Clone(ct)
		tampered[i] ^= 0x01
		body := envelopeRaw(tampered)
		attempts = append(attempts,
			attempt{"unsigned byte " + strconv.Itoa(i), body, http.Header{}},
			attempt{"captured signature byte " + strconv.Itoa(i), body, capturedHdr.Clone()},
			attempt{"forged signature byte " + strconv.Itoa(i), body, feishufake.SignedHeaders("guessed-key", now, "n", body)},
		)
	}
	// Truncated and extended ciphertexts.
	for _, n := range []int{16, 31, 32, 48, len(ct) - 16, len(ct) - 1} {
		attempts = append(attempts, attempt{"truncated " + strconv.Itoa(n), envelopeRaw(ct[:n]), capturedHdr.Clone()})
	}
	attempts = append(attempts,
		attempt{"extended", envelopeRaw(append(bytes.Clone(ct), ct[16:32]...)), capturedHdr.Clone()},
		attempt{"captured body, headers stripped", captured, http.Header{}},
		attempt{"captured body, other nonce", captured, func() http.Header {
			h := capturedHdr.Clone()
			h.Set("X-Lark-Request-Nonce", "other")
			return h
		}()},
	)

	for _, a := range attempts {
		status, body := e.post(t, a.body, a.hdr)
		require.Equal(t, RejectStatus, status, a.name)
		require.Equal(t, RejectBody, body, a.name)
	}
	assert.Zero(t, decrypted.Load(), "no unauthenticated ciphertext was decrypted")
	assert.Zero(t, e.h.count(), "no run started")
	assert.NotContains(t, e.logs.String(), "机密内容")
	assert.NotContains(t, e.logs.String(), testToken)

	// The captured request itself is authentic and goes through, once decrypted.
	status, _ := e.post(t, captured, capturedHdr.Clone())
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, int64(1), decrypted.Load())
	assert.Equal(t, 1, e.h.count())
}

// TestWebhookUnsignedChallengeOnly checks the one path that decrypts an unsigned request: only an
// exact URL-verification challenge with the right token is answered, every other short ciphertext
// gets the uniform rejection.
func TestWebhookUnsignedChallengeOnly(t *testing.T) {
	e := startWebhook(t, testEncryptKey, time.Now())
	challenge := func(token, value string) []byte { return feishufake.ChallengeJSON(token, value) }

	status, body := e.post(t, envelope(t, challenge(testToken, "1b6aef1a-401f-406a-be41-f48911eabcef"), testEncryptKey), nil)
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"challenge":"1b6aef1a-401f-406a-be41-f48911eabcef"}`, body)

	bad := map[string][]byte{
		"wrong token":         envelope(t, challenge("guess", "c1"), testEncryptKey),
		"wrong key":           envelope(t, challenge(testToken, "c1"), "other-key"),
		"event not challenge": envelope(t, []byte(`{"type":"event_callback","token":"`+testToken+`"}`), testEncryptKey),
		"extra field":         envelope(t, []byte(`{"challenge":"c1","token":"`+testToken+`","type":"url_verification","x":"y"}`), testEncryptKey),
		"odd challenge":       envelope(t, challenge(testToken, `c1"}<script>`), testEncryptKey),
		"brace order":         envelope(t, []byte(`}{`), testEncryptKey),
		"plain challenge":     challenge(testToken, "c1"),
		"not base64":          []byte(`{"encrypt":"***"}`),
		"empty":               nil,
	}
	for name, b := range bad {
		status, got := e.post(t, b, nil)
		assert.Equal(t, RejectStatus, status, name)
		assert.Equal(t, RejectBody, got, name)
	}
	assert.Zero(t, e.h.count())
}

// TestWebhookGarbageNeverFails sends bodies that broke the SDK (panics recovered into 500s) with
// every kind of header: each gets the uniform rejection, never a 5xx.
func TestWebhookGarbageNeverFails(t *testing.T) {
	now := time.Now()
	e := startWebhook(t, testEncryptKey, now)
	inverted := envelope(t, []byte("}  {"), testEncryptKey) // the SDK sliced buf[n:m+1] with n > m+1
	bodies := map[string][]byte{
		"empty":        nil,
		"null":         []byte("null"),
		"array":        []byte("[]"),
		"open brace":   []byte("{"),
		"deep nesting": []byte(strings.Repeat("[", 100000)),
		"number":       []byte(`{"encrypt":123}`),
		"blank":        []byte(`{"encrypt":""}`),
		"binary":       {0xff, 0xfe, 0x00, 0x01},
		"short cipher": envelopeRaw([]byte("0123456789abcdef")),
		"inverted":     inverted,
		"plain event":  eventJSON("om_plain"),
		"oversize":     bytes.Repeat([]byte("a"), maxWebhookBody+10),
	}
	for name, b := range bodies {
		for hname, hdr := range map[string]http.Header{
			"unsigned": nil,
			"signed":   feishufake.SignedHeaders(testEncryptKey, now, "n-"+name, b),
			"forged":   feishufake.SignedHeaders("nope", now, "n-"+name, b),
		} {
			status, got := e.post(t, b, hdr)
			assert.Equal(t, RejectStatus, status, "%s/%s", name, hname)
			assert.Equal(t, RejectBody, got, "%s/%s", name, hname)
		}
	}
	assert.Zero(t, e.h.count())
}

func TestWebhookTimestampWindow(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	e := startWebhook(t, testEncryptKey, now)
	decrypted := countDecryptions(t)
	for name, ts := range map[string]time.Time{
		"year 2001":   time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC),
		"year 2100":   time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		"301 s early": now.Add(-301 * time.Second),
		"301 s late":  now.Add(301 * time.Second),
	} {
		body := envelope(t, eventJSON("om_stale_"+name), testEncryptKey)
		status, got := e.post(t, body, feishufake.SignedHeaders(testEncryptKey, ts, "n", body))
		assert.Equal(t, RejectStatus, status, name)
		assert.Equal(t, RejectBody, got, name)
	}
	// A timestamp that is not a number, signed correctly.
	body := envelope(t, eventJSON("om_nan"), testEncryptKey)
	hdr := http.Header{"X-Lark-Request-Timestamp": {"soon"}, "X-Lark-Request-Nonce": {"n"}}
	hdr.Set("X-Lark-Signature", signature("soon", "n", testEncryptKey, body))
	status, _ := e.post(t, body, hdr)
	assert.Equal(t, RejectStatus, status)
	assert.Zero(t, decrypted.Load())
	assert.Zero(t, e.h.count())
	assert.Contains(t, e.logs.String(), "outside the accepted window")

	for i, d := range []time.Duration{-299 * time.Second, 299 * time.Second} {
		body := envelope(t, eventJSON("om_fresh_"+strconv.Itoa(i)), testEncryptKey)
		status, _ := e.post(t, body, feishufake.SignedHeaders(testEncryptKey, now.Add(d), "n", body))
		assert.Equal(t, http.StatusOK, status)
	}
	assert.Equal(t, 2, e.h.count())
}

func signature(ts, nonce, key string, body []byte) string {
	return larkevent.Signature(ts, nonce, key, string(body))
}

// TestWebhookPlainModeUniform: without an encrypt key, the token check stays and its refusals look
// like every other.
func TestWebhookPlainModeUniform(t *testing.T) {
	e := startWebhook(t, "", time.Now())
	for name, b := range map[string][]byte{
		"wrong token": feishufake.MessageEvent{MessageID: "om_x", ChatID: "oc", Text: "x", Token: "guess"}.JSON(),
		"no token":    feishufake.MessageEvent{MessageID: "om_y", ChatID: "oc", Text: "x"}.JSON(),
		"encrypted":   envelope(t, eventJSON("om_z"), "some-key"),
		"garbage":     []byte("\x00garbage"),
	} {
		status, got := e.post(t, b, nil)
		assert.Equal(t, RejectStatus, status, name)
		assert.Equal(t, RejectBody, got, name)
	}
	assert.Zero(t, e.h.count())
	status, _ := e.post(t, eventJSON("om_ok"), nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, 1, e.h.count())
}

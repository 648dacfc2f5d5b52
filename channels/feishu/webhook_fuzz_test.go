package feishu

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecryptEvent: no ciphertext makes the decryption panic, and what it returns is always
// shorter than its input.
func FuzzDecryptEvent(f *testing.F) {
	f.Add("", "k")
	f.Add("AAAAAAAAAAAAAAAAAAAAAA==", "k")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "ekey")
	f.Fuzz(func(t *testing.T, b64, key string) {
		out, err := decryptEvent(b64, key)
		if err == nil && len(out) >= len(b64) {
			t.Fatalf("plaintext of %d bytes from %d characters", len(out), len(b64))
		}
	})
}

// FuzzWebhookRejects: any request without a valid signature gets the uniform rejection, whatever
// its body and headers.
func FuzzWebhookRejects(f *testing.F) {
	f.Add([]byte(`{"encrypt":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`), "1700000000", "n", "deadbeef")
	f.Add([]byte(`}{`), "", "", "")
	f.Add([]byte(`{"challenge":"c","token":"t","type":"url_verification"}`), "", "", "")
	c, err := New(Config{AppID: "a", AppSecret: "s", Mode: ModeWebhook, VerificationToken: "tok", EncryptKey: "ekey",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	h := c.Routes()[WebhookPath]
	f.Fuzz(func(t *testing.T, body []byte, ts, nonce, sig string) {
		req := httptest.NewRequest(http.MethodPost, WebhookPath, bytes.NewReader(body))
		if ts != "" || nonce != "" || sig != "" {
			req.Header.Set("X-Lark-Request-Timestamp", ts)
			req.Header.Set("X-Lark-Request-Nonce", nonce)
			req.Header.Set("X-Lark-Signature", sig)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != RejectStatus || rec.Body.String() != RejectBody {
			t.Fatalf("answer %d %q", rec.Code, rec.Body.String())
		}
	})
}

package wechat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/silenceper/wechat/v2/officialaccount/message"
)

// WeChat error codes the channel treats specially.
const (
	CodeSystemBusy        = -1    // transient; safe to retry
	CodeInvalidCredential = 40001 // access token invalid or not the latest: refresh once and retry
	CodeInvalidToken      = 40014 // malformed access token: refresh once and retry
	CodeTokenExpired      = 42001 // access token expired: refresh once and retry
	CodeContentTooLong    = 45002
	CodeWindowExpired     = 45015 // the user has not written within 48 hours
	CodeResponseLimit     = 45047 // too many customer-service messages since the user's last message
)

// APIError is a non-zero errcode returned by the WeChat API.
type APIError struct {
	Op   string // "token", "custom/send", "custom/typing"
	Code int
	Msg  string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("wechat %s: errcode %d: %s", e.Op, e.Code, e.Msg)
}

// CredentialsRejected reports whether WeChat refused the app's credentials (invalid AppSecret,
// AppID or credential) rather than the request.
func (e *APIError) CredentialsRejected() bool {
	return e.Op == "token" && (e.Code == 40001 || e.Code == 40013 || e.Code == 40125)
}

// WindowClosed reports whether the error means WeChat refuses further customer-service messages to
// this user until they write again (48-hour window expired or the per-window count used up).
func (e *APIError) WindowClosed() bool {
	return e.Code == CodeWindowExpired || e.Code == CodeResponseLimit
}

// Permanent tells the dispatcher not to resend the text another way: every further send to this user
// fails the same way until they write again.
func (e *APIError) Permanent() bool { return e.WindowClosed() }

func tokenInvalid(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Code == CodeInvalidCredential || ae.Code == CodeInvalidToken || ae.Code == CodeTokenExpired
}

func systemBusy(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == CodeSystemBusy
}

// apiClient talks to the WeChat HTTP API with its own base URL. The SDK's outbound helpers use
// process-global URLs (util.SetURIModifier), which cannot serve two configurations in one process,
// and its Send does not refresh a token on 40001; this small client does both.
type apiClient struct {
	base      string
	appID     string
	appSecret string
	http      *http.Client
	log       *slog.Logger
	now       func() time.Time
	backoff   time.Duration // first wait before retrying a -1 (system busy); doubles each time

	mu      sync.Mutex // held while fetching, so concurrent callers share one refresh
	token   string
	expires time.Time
}

// maxBusyRetries bounds the retries of an errcode -1 answer (WeChat's "system busy").
const maxBusyRetries = 2

// accessToken returns a cached token, fetching a new one when none is cached, it is about to expire,
// or the caller saw stale rejected.
func (c *apiClient) accessToken(ctx context.Context, stale string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" && c.token != stale && c.now().Before(c.expires) {
		return c.token, nil
	}
	var res struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	q := url.Values{"grant_type": {"client_credential"}, "appid": {c.appID}, "secret": {c.appSecret}}
	err := c.withBusyRetry(ctx, func() error {
		return c.do(ctx, "token", http.MethodGet, "/cgi-bin/token?"+q.Encode(), nil, &res)
	})
	if err != nil {
		return "", err
	}
	if res.AccessToken == "" {
		return "", fmt.Errorf("wechat token: answer without access_token")
	}
	// Refresh well before the end: a token fetched elsewhere for the same app invalidates ours
	// anyway (handled by the 40001 retry), and a small margin avoids sending with one about to lapse.
	life := time.Duration(res.ExpiresIn) * time.Second
	switch {
	case life <= 0:
		life = 5 * time.Minute
	case life > 10*time.Minute:
		life -= 5 * time.Minute
	default:
		life /= 2
	}
	c.token, c.expires = res.AccessToken, c.now().Add(life)
	return c.token, nil
}

// withBusyRetry runs call again after a short backoff while WeChat answers -1 (system busy), which
// means the request was not processed, so repeating it cannot duplicate a message.
func (c *apiClient) withBusyRetry(ctx context.Context, call func() error) error {
	wait := c.backoff
	for attempt := 0; ; attempt++ {
		err := call()
		if err == nil || !systemBusy(err) || attempt >= maxBusyRetries {
			return err
		}
		c.log.Warn("wechat: system busy, retrying", "errcode", CodeSystemBusy, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wechat: %w", ctx.Err())
		case <-t.C:
		}
		wait *= 2
	}
}

// call posts body to an access-token API path, refreshing the token once if WeChat rejects it.
func (c *apiClient) call(ctx context.Context, op, path string, body any) error {
	payload, err := marshalJSON(body)
	if err != nil {
		return fmt.Errorf("wechat %s: encode: %w", op, err)
	}
	stale := ""
	for attempt := 0; ; attempt++ {
		tok, err := c.accessToken(ctx, stale)
		if err != nil {
			return err
		}
		err = c.withBusyRetry(ctx, func() error {
			return c.do(ctx, op, http.MethodPost, path+"?access_token="+url.QueryEscape(tok), payload, nil)
		})
		if err != nil && tokenInvalid(err) && attempt == 0 {
			var ae *APIError
			errors.As(err, &ae)
			c.log.Warn("wechat: access token rejected, refreshing", "op", op, "errcode", ae.Code)
			stale = tok
			continue
		}
		return err
	}
}

// do performs one request and decodes WeChat's JSON answer. Errors never carry the URL, whose query
// holds the app secret or the access token.
func (c *apiClient) do(ctx context.Context, op, method, pathQuery string, payload []byte, out any) error {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+pathQuery, body)
	if err != nil {
		return fmt.Errorf("wechat %s: build request: %w", op, redactURLError(err))
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("wechat %s: %w", op, redactURLError(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("wechat %s: read answer: %w", op, redactURLError(err))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("wechat %s: HTTP %d", op, resp.StatusCode)
	}
	var status struct {
		ErrCode int    `json:"errcode"`
		ErrMsg  string `json:"errmsg"`
	}
	if err := json.Unmarshal(raw, &status); err != nil {
		return fmt.Errorf("wechat %s: decode answer: %w", op, err)
	}
	if status.ErrCode != 0 {
		return &APIError{Op: op, Code: status.ErrCode, Msg: status.ErrMsg}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("wechat %s: decode answer: %w", op, err)
		}
	}
	return nil
}

// redactURLError drops the URL from a *url.Error, keeping the operation and the cause.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// marshalJSON encodes without HTML escaping, so "<" in an answer is sent as one byte and counts as
// one towards the length limit.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// sendText sends one customer-service text message (message/custom/send). The wire shape is the
// SDK's CustomerMessage.
func (c *apiClient) sendText(ctx context.Context, openID, text string) error {
	return c.call(ctx, "custom/send", "/cgi-bin/message/custom/send", message.NewCustomerTextMessage(openID, text))
}

// Typing commands of message/custom/typing.
const (
	typingOn  = "Typing"
	typingOff = "CancelTyping"
)

// sendTyping shows or hides the "typing…" indicator in the user's chat.
func (c *apiClient) sendTyping(ctx context.Context, openID, command string) error {
	body := struct {
		ToUser  string `json:"touser"`
		Command string `json:"command"`
	}{openID, command}
	return c.call(ctx, "custom/typing", "/cgi-bin/message/custom/typing", body)
}

// trimBase normalises a configured base URL: no trailing slash, scheme and host required.
func trimBase(raw string) (string, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil {
		return "", fmt.Errorf("wechat: api base url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("wechat: api base url %q: want http(s)://host", raw)
	}
	return u.String(), nil
}

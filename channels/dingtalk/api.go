package dingtalk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// APIError is a failed DingTalk OpenAPI call: the HTTP status and the platform's error code.
type APIError struct {
	Op        string // what we were doing, e.g. "card streaming"
	Status    int
	Code      string
	Message   string
	RequestID string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("dingtalk: %s: HTTP %d code=%s: %s (requestid %s)", e.Op, e.Status, e.Code, e.Message, e.RequestID)
}

// tokenInvalid reports whether the error means the access token is expired or invalid, so one retry
// with a fresh token is safe.
func (e *APIError) tokenInvalid() bool {
	code := strings.ToLower(e.Code)
	return e.Status == http.StatusUnauthorized || code == "invalidauthentication" ||
		(strings.Contains(code, "token") && (strings.Contains(code, "invalid") || strings.Contains(code, "expire")))
}

// rateLimited reports whether the platform throttled the call (HTTP 429 or 403 with a QPS code).
func (e *APIError) rateLimited() bool {
	code := strings.ToLower(e.Code)
	return e.Status == http.StatusTooManyRequests || strings.Contains(code, "qpslimit") ||
		strings.Contains(code, "throttl") || strings.Contains(code, "flowcontrol")
}

// apiClient calls the DingTalk OpenAPI (api.dingtalk.com) with a cached access token.
type apiClient struct {
	base           string
	appKey         string
	appSecret      string
	http           *http.Client
	log            *slog.Logger
	retryBase      time.Duration // first rate-limit backoff
	maxRateRetries int

	mu      sync.Mutex // held while fetching, so concurrent callers share one token request
	token   string
	expires time.Time
}

// accessToken returns a cached token, fetching a new one when none is cached, it is close to expiry,
// or stale (the token that just failed) is the cached one.
func (a *apiClient) accessToken(ctx context.Context, stale string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token != "" && a.token != stale && time.Now().Before(a.expires) {
		return a.token, nil
	}
	body, _ := json.Marshal(map[string]string{"appKey": a.appKey, "appSecret": a.appSecret})
	var out struct {
		AccessToken string `json:"accessToken"`
		ExpireIn    int64  `json:"expireIn"`
	}
	if err := a.roundTrip(ctx, "access token", http.MethodPost, "/v1.0/oauth2/accessToken", "", body, &out); err != nil {
		return "", err
	}
	if out.AccessToken == "" {
		return "", errors.New("dingtalk: access token: empty accessToken in response")
	}
	life := time.Duration(out.ExpireIn) * time.Second
	// Refresh a few minutes early so a token never expires between check and use.
	margin := min(5*time.Minute, life/2)
	a.token, a.expires = out.AccessToken, time.Now().Add(life-margin)
	return a.token, nil
}

// call sends an authenticated JSON request and decodes the JSON answer into out (if non-nil). It
// refreshes the token once when the platform rejects it and backs off on rate limiting.
func (a *apiClient) call(ctx context.Context, op, method, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("dingtalk: %s: encode: %w", op, err)
	}
	stale := ""
	refreshed := false
	for attempt := 0; ; attempt++ {
		tok, err := a.accessToken(ctx, stale)
		if err != nil {
			return fmt.Errorf("dingtalk: %s: %w", op, err)
		}
		err = a.roundTrip(ctx, op, method, path, tok, body, out)
		var ae *APIError
		if err == nil || !errors.As(err, &ae) {
			return err
		}
		switch {
		case ae.tokenInvalid() && !refreshed:
			a.log.Info("dingtalk: access token rejected, refreshing", "op", op, "status", ae.Status, "code", ae.Code)
			refreshed, stale = true, tok
			continue
		case ae.rateLimited() && attempt < a.maxRateRetries:
			d := a.retryBase << attempt
			d = d/2 + rand.N(d/2+1)
			a.log.Warn("dingtalk: rate limited, backing off", "op", op, "status", ae.Status, "code", ae.Code, "delay", d)
			if !sleepCtx(ctx, d) {
				return fmt.Errorf("dingtalk: %s: %w", op, ctx.Err())
			}
			continue
		}
		return err
	}
}

// roundTrip performs one HTTP exchange. A non-2xx answer becomes an *APIError.
func (a *apiClient) roundTrip(ctx context.Context, op, method, path, token string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("dingtalk: %s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("x-acs-dingtalk-access-token", token)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("dingtalk: %s: %w", op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("dingtalk: %s: read response: %w", op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &APIError{Op: op, Status: resp.StatusCode}
		var e struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			RequestID string `json:"requestid"`
		}
		if json.Unmarshal(raw, &e) == nil {
			ae.Code, ae.Message, ae.RequestID = e.Code, e.Message, e.RequestID
		}
		if ae.Message == "" {
			ae.Message = http.StatusText(resp.StatusCode)
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("dingtalk: %s: decode response: %w", op, err)
	}
	return nil
}

// sleepCtx waits d or until ctx ends; it reports whether the full wait happened.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

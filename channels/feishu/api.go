package feishu

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
)

// Feishu error codes the channel reacts to.
const (
	codeRateLimited         = 230020   // im: too many requests to this chat/user
	codeFrequencyLimit      = 99991400 // open platform: request frequency limit
	codeTenantTokenInvalid  = 99991663
	codeAccessTokenInvalid  = 99991671
	codeTenantTokenExpired  = 99991677
	codeTokenMissing        = 99991661
	codeCardSequence        = 300317 // sequence not greater than the previous one
	codeStreamingTimeout    = 200850 // streaming mode turned itself off (10 min)
	codeStreamingClosed     = 300309 // streaming mode is off
	codeCardTooLarge        = 200860
	codeMessageTooLong      = 230025
	maxRateLimitRetries     = 4
	firstRateLimitBackoff   = 250 * time.Millisecond
	tokenRefreshMargin      = 3 * time.Minute
	minTokenLifetime        = 30 * time.Second
	defaultTokenLifetimeSec = 7200
)

// APIError is a Feishu API call that answered with a non-zero code.
type APIError struct {
	Op   string // what the channel was doing, e.g. "cardkit.content"
	Code int
	Msg  string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("feishu: %s: code %d: %s", e.Op, e.Code, e.Msg)
}

// CredentialsRejected reports whether the platform refused the app's credentials: the tenant token
// endpoint answers a non-zero code only for a wrong or disabled app_id/app_secret.
func (e *APIError) CredentialsRejected() bool { return e.Op == "tenant_access_token" }

func isTokenError(code int) bool {
	switch code {
	case codeTenantTokenInvalid, codeAccessTokenInvalid, codeTenantTokenExpired, codeTokenMissing:
		return true
	}
	return false
}

func isRateLimited(code int) bool { return code == codeRateLimited || code == codeFrequencyLimit }

// tokenSource caches the tenant access token; it refreshes before expiry and when the platform
// says the token is invalid.
type tokenSource struct {
	c   *Channel
	mu  sync.Mutex
	tok string
	exp time.Time
}

func (t *tokenSource) get(ctx context.Context, force bool) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !force && t.tok != "" && t.c.now().Before(t.exp) {
		return t.tok, nil
	}
	resp, err := t.c.client.GetTenantAccessTokenBySelfBuiltApp(ctx, &larkcore.SelfBuiltTenantAccessTokenReq{
		AppID: t.c.cfg.AppID, AppSecret: t.c.cfg.AppSecret,
	})
	if err != nil {
		return "", fmt.Errorf("feishu: tenant_access_token: %w", err)
	}
	if resp.Code != 0 || resp.TenantAccessToken == "" {
		t.c.log.Error("feishu tenant token refused", "code", resp.Code, "msg", resp.Msg)
		return "", &APIError{Op: "tenant_access_token", Code: resp.Code, Msg: resp.Msg}
	}
	life := time.Duration(resp.Expire) * time.Second
	if resp.Expire <= 0 {
		life = defaultTokenLifetimeSec * time.Second
	}
	life -= tokenRefreshMargin
	if life < minTokenLifetime {
		life = minTokenLifetime
	}
	t.tok, t.exp = resp.TenantAccessToken, t.c.now().Add(life)
	return t.tok, nil
}

// invalidate drops tok unless another caller already replaced it.
func (t *tokenSource) invalidate(tok string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok == tok {
		t.tok = ""
	}
}

// call runs one API operation with the tenant token, refreshing the token once when the platform
// rejects it and backing off when rate limited. fn is called again on every retry, so operations
// that need a fresh sequence number compute it inside fn.
func (c *Channel) call(ctx context.Context, op string, fn func(ctx context.Context, opt larkcore.RequestOptionFunc) (larkcore.CodeError, error)) error {
	refreshed := false
	backoff := firstRateLimitBackoff
	for attempt := 0; ; attempt++ {
		tok, err := c.tokens.get(ctx, false)
		if err != nil {
			return err
		}
		ce, err := fn(ctx, larkcore.WithTenantAccessToken(tok))
		if err != nil {
			c.log.Error("feishu api call failed", "op", op, "err", err)
			return fmt.Errorf("feishu: %s: %w", op, err)
		}
		switch {
		case ce.Code == 0:
			return nil
		case isTokenError(ce.Code) && !refreshed:
			c.log.Warn("feishu tenant token rejected, refreshing", "op", op, "code", ce.Code)
			c.tokens.invalidate(tok)
			refreshed = true
			continue
		case isRateLimited(ce.Code) && attempt < maxRateLimitRetries:
			c.log.Warn("feishu rate limited, backing off", "op", op, "code", ce.Code, "backoff", backoff)
			if err := sleepCtx(ctx, backoff); err != nil {
				return fmt.Errorf("feishu: %s: %w", op, err)
			}
			backoff *= 2
			continue
		}
		c.log.Error("feishu api error", "op", op, "code", ce.Code, "msg", ce.Msg)
		return &APIError{Op: op, Code: ce.Code, Msg: ce.Msg}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fetchBotOpenID asks GET /open-apis/bot/v3/info for the bot's open_id (the SDK has no typed call).
func (c *Channel) fetchBotOpenID(ctx context.Context) (string, error) {
	var openID string
	err := c.call(ctx, "bot.info", func(ctx context.Context, opt larkcore.RequestOptionFunc) (larkcore.CodeError, error) {
		resp, err := c.client.Get(ctx, "/open-apis/bot/v3/info", nil, larkcore.AccessTokenTypeTenant, opt)
		if err != nil {
			return larkcore.CodeError{}, err
		}
		var body struct {
			larkcore.CodeError
			Bot struct {
				OpenID  string `json:"open_id"`
				AppName string `json:"app_name"`
			} `json:"bot"`
		}
		if resp.StatusCode != http.StatusOK && len(resp.RawBody) == 0 {
			return larkcore.CodeError{}, fmt.Errorf("http status %d", resp.StatusCode)
		}
		if err := json.Unmarshal(resp.RawBody, &body); err != nil {
			return larkcore.CodeError{}, fmt.Errorf("decode (http %d): %w", resp.StatusCode, err)
		}
		openID = body.Bot.OpenID
		return body.CodeError, nil
	})
	if err != nil {
		return "", err
	}
	if openID == "" {
		return "", fmt.Errorf("feishu: bot.info: empty open_id")
	}
	return openID, nil
}

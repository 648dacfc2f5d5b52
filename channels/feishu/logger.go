package feishu

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// larkLogger routes the SDK's log lines into slog. The SDK's debug lines carry request and event
// bodies (tokens, message text), so they are dropped; URLs lose their credentials.
type larkLogger struct{ log *slog.Logger }

func newLarkLogger(l *slog.Logger) larkLogger {
	return larkLogger{log: l.With("component", "lark-sdk")}
}

// secretParams matches query parameters of the long-connection URL that authenticate it.
var secretParams = regexp.MustCompile(`(?i)((?:access_key|ticket|app_secret|appsecret|token)=)[^&\s"]+`)

func redact(s string) string { return secretParams.ReplaceAllString(s, "${1}REDACTED") }

func (l larkLogger) msg(args []any) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		parts = append(parts, fmt.Sprint(a))
	}
	return redact(strings.Join(parts, " "))
}

func (l larkLogger) Debug(context.Context, ...any) {}

func (l larkLogger) Info(ctx context.Context, args ...any) {
	l.log.InfoContext(ctx, l.msg(args))
}

func (l larkLogger) Warn(ctx context.Context, args ...any) {
	l.log.WarnContext(ctx, l.msg(args))
}

func (l larkLogger) Error(ctx context.Context, args ...any) {
	l.log.ErrorContext(ctx, l.msg(args))
}

package channels

import (
	"log/slog"
	"runtime/debug"
)

// LogPanic, deferred at the top of a goroutine a channel starts, turns a panic there into an error
// log line (with the stack) instead of the end of the process:
//
//	go func() { defer channels.LogPanic(log, "stream pinger"); … }()
//
// It must be the deferred call itself, so that its recover sees the panic.
func LogPanic(log *slog.Logger, what string) {
	if r := recover(); r != nil {
		log.Error("goroutine panicked", "goroutine", what, "panic", r, "stack", string(debug.Stack()))
	}
}

package channels

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLogPanicKeepsTheProcess(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer LogPanic(log, "pinger")
		panic("boom")
	}()
	<-done
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, buf.String(), "goroutine panicked")
	assert.Contains(t, buf.String(), "goroutine=pinger")
	assert.Contains(t, buf.String(), "panic=boom")
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

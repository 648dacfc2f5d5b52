package gateway

import (
	"context"
	"errors"
	"sync"

	"github.com/citegate/citegate/store"
)

// readCounter counts the store reads the gateway makes and refuses to read a whole session
// (ListMessages), so a handler that still does fails. refuseRun makes ListRunMessages fail too.
type readCounter struct {
	Store
	mu        sync.Mutex
	calls     map[string]int
	refuseRun bool
}

func (c *readCounter) count(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[name]++
}

// reset forgets the reads counted so far.
func (c *readCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = nil
}

// n is how many times the method name was called since the last reset.
func (c *readCounter) n(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

func (c *readCounter) ListMessages(context.Context, string) ([]store.Message, error) {
	c.count("ListMessages")
	return nil, errors.New("a whole session must not be read")
}

func (c *readCounter) ListRunMessages(ctx context.Context, runID string) ([]store.Message, error) {
	c.count("ListRunMessages")
	c.mu.Lock()
	refuse := c.refuseRun
	c.mu.Unlock()
	if refuse {
		return nil, errors.New("the run must not be read")
	}
	return c.Store.ListRunMessages(ctx, runID)
}

func (c *readCounter) GetMessage(ctx context.Context, id uint64) (store.Message, error) {
	c.count("GetMessage")
	return c.Store.GetMessage(ctx, id)
}

func (c *readCounter) GetToolResult(ctx context.Context, runID, callID string) (store.Message, error) {
	c.count("GetToolResult")
	return c.Store.GetToolResult(ctx, runID, callID)
}

func (c *readCounter) ListMessagesAfter(ctx context.Context, sessionID string, afterID uint64, limit int) ([]store.Message, error) {
	c.count("ListMessagesAfter")
	return c.Store.ListMessagesAfter(ctx, sessionID, afterID, limit)
}

func (c *readCounter) ListDialogBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]store.Message, error) {
	c.count("ListDialogBefore")
	return c.Store.ListDialogBefore(ctx, sessionID, beforeID, limit)
}

func (c *readCounter) ListRuns(ctx context.Context, sessionID string) ([]store.Run, error) {
	c.count("ListRuns")
	return c.Store.ListRuns(ctx, sessionID)
}

func (c *readCounter) GetRun(ctx context.Context, id string) (store.Run, error) {
	c.count("GetRun")
	return c.Store.GetRun(ctx, id)
}

// withReadCounter installs c between the gateway and the test's store.
func withReadCounter(c *readCounter) envOpt {
	return func(cfg *Config, _ *agentCfg) { c.Store = cfg.Store; cfg.Store = c }
}

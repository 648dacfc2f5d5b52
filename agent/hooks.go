package agent

import (
	"context"
	"fmt"
	"runtime/debug"
)

// runHooks runs the completion hooks after the run's record is committed, each bounded by
// HookTimeout and isolated from the others. The record (answer, phase, citations) is already final:
// nothing a hook does or fails to do changes it, the run's outcome or its events.
func (rs *runState) runHooks(rr RunResult) {
	a, h := rs.a, rs.h
	for _, hook := range a.hooks {
		if err := a.callHook(rs.pctx, hook.Name(), func(ctx context.Context) error { return hook.AfterRun(ctx, rr) }); err != nil {
			a.log.Warn("completion hook failed", "hook", hook.Name(), "run", h.ID, "err", err)
		}
	}
}

// callHook runs fn with HookTimeout. fn runs in its own goroutine so that a hook ignoring its
// context cannot hold the run (its late result is dropped); a panic in it becomes an error.
func (a *Agent) callHook(parent context.Context, name string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, a.cfg.HookTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				a.log.Error("hook panicked", "hook", name, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				done <- fmt.Errorf("hook %s panicked: %v", name, r)
			}
		}()
		done <- fn(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("hook %s: %w", name, ctx.Err())
	}
}

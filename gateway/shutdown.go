package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ShutdownBudget bounds Shutdown when its context has no earlier deadline: the agent gets at
// most this long to stop its runs, and the dispatcher as long again to deliver their endings, so
// the serving side stops within twice this budget after SIGTERM.
const ShutdownBudget = 10 * time.Second

// Closer is what Shutdown needs of the agent: refuse new turns, cancel running ones, and return
// once each has persisted its terminal phase and emitted run.finished (bounded by ctx).
// *agent.Agent satisfies it.
type Closer interface {
	Close(ctx context.Context) error
}

// Shutdown stops the answer path in the one order that leaves nothing half-done; serve and the
// tests use it alike. Inbound traffic (channels, HTTP) must already be stopped.
//
//  1. The dispatcher learns that the server is stopping, so every reply whose run is cancelled from
//     now on ends with "stopped: server restarting" rather than the /stop text.
//  2. The agent refuses new turns and cancels its runs; each marks its run CANCELLED in the store
//     and emits run.finished, which the reply pumps turn into their final Finish (Feishu and
//     DingTalk cards leave the streaming state).
//  3. The dispatcher waits for those endings to reach the platforms, then cancels what is left.
//
// Each step is bounded by ShutdownBudget (or ctx, if sooner). d may be nil (no channels).
func Shutdown(ctx context.Context, ag Closer, d *Dispatcher) error {
	if d != nil {
		d.Stopping()
	}
	var errs []error
	actx, cancel := context.WithTimeout(ctx, ShutdownBudget)
	if err := ag.Close(actx); err != nil {
		errs = append(errs, fmt.Errorf("agent: %w", err))
	}
	cancel()
	if d != nil {
		dctx, cancel := context.WithTimeout(ctx, ShutdownBudget)
		if err := d.Close(dctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	return errors.Join(errs...)
}

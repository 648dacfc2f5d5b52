package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// citationHook verifies a completed run's markers against the sources the run really retrieved and
// records the verified citations on the final answer (DESIGN §4).
type citationHook struct {
	st  Store
	log *slog.Logger
}

// NewCitationHook returns the citation hook. New installs one itself (first, COMPLETED runs only);
// it is exported so tests and tools can run the same check on stored runs.
func NewCitationHook(st Store, logger *slog.Logger) Hook {
	return newCitationHook(st, logger)
}

func newCitationHook(st Store, logger *slog.Logger) *citationHook {
	if logger == nil {
		logger = slog.Default()
	}
	return &citationHook{st: st, log: logger.With("hook", "citations")}
}

// Name implements Hook.
func (c *citationHook) Name() string { return "citations" }

// AfterRun implements Hook.
func (c *citationHook) AfterRun(ctx context.Context, r RunResult) error {
	_, err := c.apply(ctx, r)
	return err
}

// apply builds the registry from the run's TOOL messages in id order, verifies the final content,
// merges metadata.citations when at least one marker is valid and always records the marker counts.
// It does nothing for runs that did not complete.
func (c *citationHook) apply(ctx context.Context, r RunResult) (citations.Verification, error) {
	if r.Run.Phase != store.PhaseCompleted || r.Final == nil {
		return citations.Verification{}, nil
	}
	msgs, err := c.st.ListMessages(ctx, r.Run.SessionID)
	if err != nil {
		return citations.Verification{}, fmt.Errorf("citations: list messages: %w", err)
	}
	var results []citations.ToolResult
	for _, m := range msgs {
		if m.Role == store.RoleTool && m.RunID == r.Run.ID {
			results = append(results, citations.ToolResult{Tool: m.ToolName, CallID: m.ToolCallID, MessageID: m.ID, Content: m.Content, At: m.CreatedAt})
		}
	}
	reg := citations.BuildRegistry(results)
	if reg.Overflow > 0 {
		c.log.Debug("registry cap reached", "run", r.Run.ID, "dropped_sources", reg.Overflow)
	}
	v := citations.Verify(r.Final.Content, reg)
	var errs []error
	if len(v.Citations) > 0 {
		raw, err := json.Marshal(v.Citations)
		if err == nil {
			err = c.st.MergeMetadata(ctx, r.Final.ID, map[string]json.RawMessage{"citations": raw})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("citations: store on message %d: %w", r.Final.ID, err))
			v.Citations = nil
		}
	}
	if err := c.st.SetRunMarkers(ctx, r.Run.ID, v.Seen, v.Kept, v.Dropped); err != nil {
		errs = append(errs, fmt.Errorf("citations: marker counts: %w", err))
	}
	if v.Dropped > 0 {
		c.log.Info("dropped citation markers", "run", r.Run.ID, "seen", v.Seen, "kept", v.Kept, "dropped", v.Dropped, "sources", reg.Len())
	}
	return v, errors.Join(errs...)
}

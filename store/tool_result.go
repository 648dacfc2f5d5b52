package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// runIndexValue is the value of m's run_messages entry: its kind byte and, for a TOOL message, its
// tool call id, so that GetToolResult finds a run's result of one call without decoding the other
// messages of the run. Entries written before this value existed are empty and are decoded instead.
func runIndexValue(m Message, kind byte) []byte {
	if kind != kindTool {
		return []byte{kind}
	}
	v := make([]byte, 0, 1+len(m.ToolCallID))
	v = append(v, kind)
	return append(v, m.ToolCallID...)
}

// GetToolResult returns the first TOOL message of run runID that answers tool call callID, or
// ErrNotFound. It reads the run's index entries and decodes the one message that matches (entries
// written before the index named their call are decoded to find out), never the rest of the run.
func (s *Store) GetToolResult(ctx context.Context, runID, callID string) (Message, error) {
	var out Message
	err := s.view(ctx, "get tool result", func(tx *bolt.Tx) error {
		if runID == "" || callID == "" {
			return fmt.Errorf("tool result %q of run %q: %w", callID, runID, ErrNotFound)
		}
		msgs := tx.Bucket(bucketMessages)
		want := append([]byte{kindTool}, callID...)
		err := scanPrefix(tx.Bucket(bucketRunMessages), runID, func(suffix, v []byte) error {
			if len(suffix) != 8 {
				return fmt.Errorf("corrupt run message index key for run %q", runID)
			}
			if len(v) > 0 && !bytes.Equal(v, want) {
				return nil
			}
			var m Message
			if err := getJSON(msgs, suffix, "message", &m); err != nil {
				return err
			}
			if m.Role != RoleTool || m.ToolCallID != callID || m.RunID != runID {
				return nil
			}
			out = m
			return errStop
		})
		if errors.Is(err, errStop) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("tool result %q of run %q: %w", callID, runID, ErrNotFound)
	})
	if err != nil {
		return Message{}, err
	}
	return out, nil
}

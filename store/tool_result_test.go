package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// TestGetToolResultOldIndexEntries: run index entries written before they named their tool call
// (empty values) are decoded to find the result, so older files answer GetToolResult too; new
// entries carry the call id.
func TestGetToolResultOldIndexEntries(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, t.TempDir()+"/citegate.db", nil)
	sess := newSession(t, s, "u1")
	all := fillSession(t, s, sess, 2)
	tool := all[6] // run1's TOOL message (fillSession: USER, calls, TOOL, answer per turn)
	require.Equal(t, RoleTool, tool.Role)
	assert.Equal(t, append([]byte{kindTool}, tool.ToolCallID...), rawGet(t, s, bucketRunMessages, prefixKey(tool.RunID, u64(tool.ID))))
	got, err := s.GetToolResult(ctx, tool.RunID, tool.ToolCallID)
	require.NoError(t, err)
	assert.Equal(t, tool.ID, got.ID)

	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		idx := tx.Bucket(bucketRunMessages)
		for _, m := range all {
			if m.RunID != "" {
				if err := idx.Put(prefixKey(m.RunID, u64(m.ID)), nil); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	got, err = s.GetToolResult(ctx, tool.RunID, tool.ToolCallID)
	require.NoError(t, err)
	assert.Equal(t, tool.ID, got.ID)
	_, err = s.GetToolResult(ctx, tool.RunID, "other")
	require.ErrorIs(t, err, ErrNotFound)
}

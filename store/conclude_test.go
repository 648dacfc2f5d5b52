package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// startRun creates a session's USER message and a RUNNING run for it.
func startRun(t *testing.T, s *Store, sess Session) Run {
	t.Helper()
	ctx := context.Background()
	u, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: "q"})
	require.NoError(t, err)
	r, err := s.CreateRun(ctx, Run{SessionID: sess.ID, Channel: "desktop", UserMessageID: u.ID})
	require.NoError(t, err)
	return r
}

// fillSession appends n turns (USER, ASSISTANT with a tool call, TOOL, ASSISTANT answer) to sess.
func fillSession(t *testing.T, s *Store, sess Session, turns int) []Message {
	t.Helper()
	ctx := context.Background()
	var out []Message
	for i := range turns {
		for _, m := range []Message{
			{Role: RoleUser, Content: fmt.Sprintf("q%d", i)},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "web_search", Arguments: "{}"}}},
			{Role: RoleTool, ToolName: "web_search", ToolCallID: "c", Content: `{"results":[]}`},
			{Role: RoleAssistant, Content: fmt.Sprintf("a%d", i)},
		} {
			m.SessionID = sess.ID
			m.RunID = "run" + strconv.Itoa(i)
			stored, err := s.AppendMessage(ctx, m)
			require.NoError(t, err)
			out = append(out, stored)
		}
	}
	return out
}

func ids(ms []Message) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// TestOpenMigratesSchema1 writes a file the way schema 1 did (no kinds, no run index, version 1)
// and checks that Open fills in both.
func TestOpenMigratesSchema1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "citegate.db")
	s := openAt(t, path, nil)
	sess := newSession(t, s, "u1")
	all := fillSession(t, s, sess, 3)
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		idx := tx.Bucket(bucketSessionMessages)
		for _, m := range all {
			if err := idx.Put(prefixKey(sess.ID, u64(m.ID)), nil); err != nil {
				return err
			}
		}
		if err := tx.DeleteBucket(bucketRunMessages); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketSessionDialog); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("1"))
	}))
	// Schema-1 entries without a kind still read correctly before the migration.
	dialog, err := s.ListDialogBefore(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	assert.Len(t, dialog, 6)
	require.NoError(t, s.Close())

	s = openAt(t, path, nil)
	assert.Equal(t, []byte(strconv.Itoa(schemaVersion)), rawGet(t, s, bucketMeta, keySchemaVersion))
	assert.Equal(t, []byte{kindTool}, rawGet(t, s, bucketSessionMessages, prefixKey(sess.ID, u64(all[2].ID))))
	own, err := s.ListRunMessages(ctx, "run1")
	require.NoError(t, err)
	assert.Equal(t, ids(all[4:8]), ids(own))
	dialog, err = s.ListDialogBefore(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	assert.Len(t, dialog, 6)
	lines, err := s.ListDialogLinesBefore(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	assert.Equal(t, ids(dialog), lineIDs(lines), "the dialog projection is built as well")
	checkConsistency(t, s)
}

package store

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func lineIDs(ls []DialogLine) []uint64 {
	out := make([]uint64, len(ls))
	for i, l := range ls {
		out[i] = l.ID
	}
	return out
}

// TestOpenMigratesSchema2 takes a file as schema 2 left it (no dialog projection) and checks that
// Open builds the projection from the messages: the same lines, interrupted answers flagged, and
// a file that fails to migrate is left as it was.
func TestOpenMigratesSchema2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "citegate.db")
	s := openAt(t, path, nil)
	sess := newSession(t, s, "u1")
	fillSession(t, s, sess, 3)
	partial, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, RunID: "run9", Role: RoleAssistant, Content: "half",
		Metadata: json.RawMessage(`{"interrupted":true}`)})
	require.NoError(t, err)
	want, err := s.ListDialogLinesBefore(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	require.Len(t, want, 7)
	assert.True(t, want[6].Interrupted)
	assert.Equal(t, partial.ID, want[6].ID)
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketSessionDialog); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("2"))
	}))
	require.NoError(t, s.Close())

	s = openAt(t, path, nil)
	assert.Equal(t, []byte(strconv.Itoa(schemaVersion)), rawGet(t, s, bucketMeta, keySchemaVersion))
	got, err := s.ListDialogLinesBefore(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	checkConsistency(t, s)
}

// TestDialogLineCorruptIsAnError: a damaged projection entry is reported, never a panic.
func TestDialogLineCorruptIsAnError(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, filepath.Join(t.TempDir(), "citegate.db"), nil)
	sess := newSession(t, s, "u1")
	m, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleUser, Content: "q"})
	require.NoError(t, err)
	for _, v := range [][]byte{{}, {kindUser}, {kindUser, 0, 9, 'a'}, {kindTool, 0, 0}} {
		rawPut(t, s, bucketSessionDialog, prefixKey(sess.ID, u64(m.ID)), v)
		_, err = s.ListDialogLinesBefore(ctx, sess.ID, 0, 10)
		require.Error(t, err, "%q", v)
	}
}

func TestMetaInterrupted(t *testing.T) {
	for raw, want := range map[string]bool{
		``:                             false,
		`{}`:                           false,
		`{"interrupted":true}`:         true,
		`{"a":1,"interrupted": true }`: true,
		`{"interrupted":false}`:        false,
		`{"interrupted":"true"}`:       false,
		`{"interrupted":true,"interrupted":false}`: false,
		`{"x":{"interrupted":true}}`:               false,
		`{"excerpt":"\"interrupted\":true"}`:       false,
	} {
		assert.Equal(t, want, metaInterrupted(json.RawMessage(raw)), raw)
	}
}

package store

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBoltOptionsFileOpensEitherWay: a file written without a synced freelist opens with bbolt's
// defaults (an older citegate) and the other way round, every record intact and the page check
// clean each time.
func TestBoltOptionsFileOpensEitherWay(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "citegate.db")
	var want []Message
	for i, opt := range []Options{{}, WithBoltDefaults(Options{}), {}, WithBoltDefaults(Options{})} {
		opt.Logger = quietLogger()
		s, err := Open(path, opt)
		require.NoError(t, err, "open %d", i)
		sess := newSession(t, s, "u1")
		want = append(want, fillSession(t, s, sess, 20)...)
		got := 0
		sessions, err := s.ListSessions(ctx, "u1")
		require.NoError(t, err)
		for _, sess := range sessions {
			msgs, err := s.ListMessages(ctx, sess.ID)
			require.NoError(t, err)
			got += len(msgs)
		}
		assert.Equal(t, len(want), got, "open %d", i)
		checkConsistency(t, s)
		require.NoError(t, s.Close())
	}
}

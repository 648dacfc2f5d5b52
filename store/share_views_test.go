package store

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShareCoverageBackfill: a share written before coverage was recorded gets it at Open, from
// the message index, once; its views start at zero.
func TestShareCoverageBackfill(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "citegate.db")
	clock := newClock()
	s := openAt(t, path, clock)
	sess := newSession(t, s, "alice")
	var last Message
	for i, role := range []Role{RoleUser, RoleTool, RoleAssistant, RoleUser, RoleAssistant} {
		clock.Advance(time.Minute)
		m := Message{SessionID: sess.ID, Role: role, Content: "x"}
		if i == 1 {
			m.ToolCallID, m.ToolName = "c1", "web_search"
		}
		var err error
		last, err = s.AppendMessage(ctx, m)
		require.NoError(t, err)
	}
	tok, sh, err := s.CreateShare(ctx, sess.ID, "alice", last.ID)
	require.NoError(t, err)
	require.Equal(t, 4, sh.Messages)
	legacy := sh
	legacy.ShareStats = ShareStats{}
	raw, err := json.Marshal(legacy)
	require.NoError(t, err)
	rawPut(t, s, bucketShares, []byte(sh.TokenHash), raw) // the record as an older citegate wrote it
	require.NoError(t, s.Close())

	s = openAt(t, path, clock)
	got, err := s.GetShare(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, sh, got)
	assert.True(t, last.CreatedAt.Equal(got.WatermarkAt))
	checkConsistency(t, s)
}

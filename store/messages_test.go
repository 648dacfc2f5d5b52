package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMergeMetadataRejectsBadStoredMetadata(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	sess := newSession(t, s, "u1")
	for _, bad := range []string{`[1,2]`, `"str"`, `42`, `null`} {
		t.Run(bad, func(t *testing.T) {
			m, err := s.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleAssistant, Content: "x"})
			require.NoError(t, err)
			// Write the corrupt record behind the store's back, as an old or foreign writer might.
			record := fmt.Sprintf(`{"id":%d,"sessionId":%q,"role":"ASSISTANT","content":"x","metadata":%s,"createdAt":"2026-01-01T00:00:00Z"}`,
				m.ID, sess.ID, bad)
			rawPut(t, s, bucketMessages, u64(m.ID), []byte(record))

			err = s.MergeMetadata(ctx, m.ID, map[string]json.RawMessage{"citations": json.RawMessage(`[]`)})
			require.ErrorIs(t, err, ErrBadMetadata)
			assert.Equal(t, record, string(rawGet(t, s, bucketMessages, u64(m.ID))), "nothing written")
		})
	}
}

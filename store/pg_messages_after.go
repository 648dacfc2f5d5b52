package store

import (
	"context"
	"fmt"
)

// pgListAfterSQL reads a session's messages above $2 as a range of the (session_id, id) index, for
// the reason given at pgSessionWindow: "session_id = $1 AND id > $2 ORDER BY id LIMIT n" may be
// planned as a forward walk of the primary key that reads every other session's messages first.
const pgListAfterSQL = `SELECT ` + pgMessageCols + ` FROM messages
	WHERE (session_id, id) > ($1, $2) AND (session_id, id) < ($1, 9223372036854775807)
	ORDER BY session_id, id LIMIT $3`

// ListMessagesAfter returns up to limit of a session's messages with ids above afterID (0: from the
// first), in ascending id order (see Store.ListMessagesAfter).
func (p *PG) ListMessagesAfter(ctx context.Context, sessionID string, afterID uint64, limit int) ([]Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("store: list messages after: %w: limit must be positive", ErrInvalid)
	}
	out := []Message{}
	if afterID > 1<<63-1 {
		// No id is that large (ids are BIGINT); only the session's existence is left to report.
		err := p.q(ctx, "list messages after", func(q pgq) error { return sessionExists(ctx, q, sessionID) })
		return out, err
	}
	return listInSession(ctx, p, "list messages after", sessionID, scanMessage, pgListAfterSQL, sessionID, i64(afterID), limit)
}

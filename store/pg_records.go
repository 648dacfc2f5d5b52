package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sessions, conversation bindings, messages, runs and dedup keys on PostgreSQL. Each method keeps
// the contract documented on its bbolt twin (sessions.go, messages.go, runs.go, seen.go,
// inbound.go).

const pgSessionCols = `id, user_id, channel, title, created_at, updated_at`

func scanSession(row pgx.Row) (Session, error) {
	var s Session
	if err := row.Scan(&s.ID, &s.UserID, &s.Channel, &s.Title, &s.CreatedAt, &s.UpdatedAt); err != nil {
		return Session{}, err
	}
	s.CreatedAt, s.UpdatedAt = utc(s.CreatedAt), utc(s.UpdatedAt)
	return s, nil
}

func insertSessionPG(ctx context.Context, q pgq, sess Session) error {
	tag, err := q.Exec(ctx, `INSERT INTO sessions (`+pgSessionCols+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (id) DO NOTHING`, sess.ID, sess.UserID, sess.Channel, sess.Title, sess.CreatedAt, sess.UpdatedAt)
	if err != nil {
		return fmt.Errorf("session %q: %w", sess.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("session %q: %w", sess.ID, ErrConflict)
	}
	return nil
}

// CreateSession stores a new session (see Store.CreateSession).
func (p *PG) CreateSession(ctx context.Context, sess Session) (Session, error) {
	sess, err := p.prepareSession(sess)
	if err != nil {
		return Session{}, fmt.Errorf("store: create session: %w", err)
	}
	if err := p.q(ctx, "create session", func(q pgq) error { return insertSessionPG(ctx, q, sess) }); err != nil {
		return Session{}, err
	}
	return sess, nil
}

// GetSession returns the session with id, or ErrNotFound.
func (p *PG) GetSession(ctx context.Context, id string) (Session, error) {
	var sess Session
	err := p.q(ctx, "get session", func(q pgq) error {
		var err error
		sess, err = scanSession(q.QueryRow(ctx, `SELECT `+pgSessionCols+` FROM sessions WHERE id = $1`, id))
		return notFound(err, "session", id)
	})
	return sess, err
}

// ListSessions returns userID's sessions, most recently updated first (see Store.ListSessions).
func (p *PG) ListSessions(ctx context.Context, userID string) ([]Session, error) {
	out := []Session{}
	err := p.q(ctx, "list sessions", func(q pgq) error {
		rows, err := q.Query(ctx, `SELECT `+pgSessionCols+` FROM sessions WHERE user_id = $1
			ORDER BY updated_at DESC, created_at DESC, id COLLATE "C"`, userID)
		if err != nil {
			return err
		}
		out, err = collect(rows, out, scanSession)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SetSessionTitle replaces a session's title without bumping UpdatedAt.
func (p *PG) SetSessionTitle(ctx context.Context, id, title string) error {
	return p.q(ctx, "set session title", func(q pgq) error {
		tag, err := q.Exec(ctx, `UPDATE sessions SET title = $2 WHERE id = $1`, id, title)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("session %q: %w", id, ErrNotFound)
		}
		return err
	})
}

// BindConversation points a conversation key at sessionID, replacing any earlier binding.
func (p *PG) BindConversation(ctx context.Context, key, sessionID string) error {
	if key == "" {
		return fmt.Errorf("store: bind conversation: %w: empty conversation key", ErrInvalid)
	}
	return p.tx(ctx, "bind conversation", func(tx pgx.Tx) error {
		if err := sessionExists(ctx, tx, sessionID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO conversations (key, session_id) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET session_id = EXCLUDED.session_id`, key, sessionID)
		return err
	})
}

// ConversationSession returns the session bound to a conversation key, or ErrNotFound.
func (p *PG) ConversationSession(ctx context.Context, key string) (string, error) {
	var id string
	err := p.q(ctx, "conversation session", func(q pgq) error {
		return notFound(q.QueryRow(ctx, `SELECT session_id FROM conversations WHERE key = $1`, key).Scan(&id), "conversation", key)
	})
	return id, err
}

func sessionExists(ctx context.Context, q pgq, id string) error {
	var one int
	return notFound(q.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1`, id).Scan(&one), "session", id)
}

// collect appends every row scanned by scan to out.
// listInSession runs one query over a session's rows and scans them; an empty answer is ErrNotFound
// when the session itself does not exist.
func listInSession[T any](ctx context.Context, p *PG, op, sessionID string, scan func(pgx.Row) (T, error), sql string, args ...any) ([]T, error) {
	var out []T
	err := p.q(ctx, op, func(q pgq) error {
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		if out, err = collect(rows, []T{}, scan); err != nil {
			return err
		}
		if len(out) == 0 {
			return sessionExists(ctx, q, sessionID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func collect[T any](rows pgx.Rows, out []T, scan func(pgx.Row) (T, error)) ([]T, error) {
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Messages.

const pgMessageCols = `id, session_id, run_id, role, content, tool_calls, tool_call_id, tool_name, metadata, created_at`

func scanMessage(row pgx.Row) (Message, error) {
	var (
		m     Message
		id    int64
		calls string
		meta  *string
	)
	if err := row.Scan(&id, &m.SessionID, &m.RunID, &m.Role, &m.Content, &calls, &m.ToolCallID, &m.ToolName, &meta, &m.CreatedAt); err != nil {
		return Message{}, err
	}
	m.ID = uint64(id)
	m.CreatedAt = utc(m.CreatedAt)
	if calls != "" {
		if err := json.Unmarshal([]byte(calls), &m.ToolCalls); err != nil {
			return Message{}, fmt.Errorf("decode tool calls of message %d: %w", id, err)
		}
	}
	if meta != nil {
		m.Metadata = json.RawMessage(*meta)
	}
	return m, nil
}

// appendPG writes a prepared message: it locks and bumps its session (ErrNotFound when there is
// none) and inserts the message, whose id the identity column assigns. Holding the session row
// while the id is drawn makes a session's ids commit in increasing order, as with bbolt's single
// writer, so "the newest message" and share watermarks mean the same on both backends.
func (p *PG) appendPG(ctx context.Context, tx pgx.Tx, m Message) (Message, error) {
	tag, err := tx.Exec(ctx, `UPDATE sessions SET updated_at = GREATEST(updated_at, $2) WHERE id = $1`, m.SessionID, p.nowUTC())
	if err != nil {
		return Message{}, fmt.Errorf("session %q: %w", m.SessionID, err)
	}
	if tag.RowsAffected() == 0 {
		return Message{}, fmt.Errorf("session %q: %w", m.SessionID, ErrNotFound)
	}
	var calls string
	if len(m.ToolCalls) > 0 {
		raw, err := encodeJSON(m.ToolCalls)
		if err != nil {
			return Message{}, fmt.Errorf("encode tool calls: %w", err)
		}
		calls = string(raw)
	}
	var meta *string
	if m.Metadata != nil {
		s := string(m.Metadata)
		meta = &s
	}
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO messages (session_id, run_id, role, kind, content, tool_calls, tool_call_id, tool_name, metadata, created_at, interrupted)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id`,
		m.SessionID, m.RunID, string(m.Role), string(rune(kindOf(m))), m.Content, calls, m.ToolCallID, m.ToolName, meta, m.CreatedAt,
		metaInterrupted(m.Metadata)).Scan(&id)
	if err != nil {
		return Message{}, fmt.Errorf("insert message: %w", err)
	}
	m.ID = uint64(id)
	return m, nil
}

// AppendMessage stores m as the next message of its session (see Store.AppendMessage).
func (p *PG) AppendMessage(ctx context.Context, m Message) (Message, error) {
	in, err := p.prepareMessage(m)
	if err != nil {
		return Message{}, fmt.Errorf("store: append message: %w", err)
	}
	var out Message
	err = p.tx(ctx, "append message", func(tx pgx.Tx) error {
		var err error
		out, err = p.appendPG(ctx, tx, in)
		return err
	})
	if err != nil {
		return Message{}, err
	}
	return out, nil
}

// GetMessage returns the message with id, or ErrNotFound.
func (p *PG) GetMessage(ctx context.Context, id uint64) (Message, error) {
	var m Message
	err := p.q(ctx, "get message", func(q pgq) error {
		var err error
		m, err = scanMessage(q.QueryRow(ctx, `SELECT `+pgMessageCols+` FROM messages WHERE id = $1`, i64(id)))
		return notFound(err, "message", id)
	})
	return m, err
}

// ListMessages returns a session's messages in ascending id order; an unknown session is
// ErrNotFound.
func (p *PG) ListMessages(ctx context.Context, sessionID string) ([]Message, error) {
	return listInSession(ctx, p, "list messages", sessionID, scanMessage, `SELECT `+pgMessageCols+` FROM messages WHERE session_id = $1 ORDER BY id`, sessionID)
}

// ListMessagesBefore returns up to limit of a session's newest messages below beforeID (0: no
// bound), in ascending id order (see Store.ListMessagesBefore).
func (p *PG) ListMessagesBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]Message, error) {
	return p.listBefore(ctx, "list messages before", sessionID, beforeID, limit, false)
}

// ListDialogBefore is ListMessagesBefore restricted to USER messages and ASSISTANT answers; it
// reads the partial index messages_dialog_idx, so tool traffic is never touched.
func (p *PG) ListDialogBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]Message, error) {
	return p.listBefore(ctx, "list dialog before", sessionID, beforeID, limit, true)
}

// pgSessionWindow selects a session's messages with ids below $2 ($1 the session) as a range of
// the (session_id, id) indexes. Written as "session_id = $1 AND id < $2 ORDER BY id DESC LIMIT n",
// a cached generic plan walks the primary key backwards and filters by session: fine for the
// newest session, hundreds of milliseconds for an old one (measured with 200,000 messages). The
// row comparisons name no equality on session_id, so only those indexes provide the order and the
// plan reads n entries whatever the session's age. With citegate's deterministic collations the
// two bounds admit no other session.
const pgSessionWindow = `(session_id, id) < ($1, $2) AND (session_id, id) > ($1, 0)`

// pgListBeforeSQL is the page query of ListMessagesBefore (dialog false) and ListDialogBefore:
// $1 session, $2 exclusive upper id bound, $3 limit.
func pgListBeforeSQL(dialog bool) string {
	if dialog {
		return `SELECT ` + pgMessageCols + ` FROM messages WHERE ` + pgSessionWindow + ` AND kind IN ('u', 'a') ORDER BY session_id DESC, id DESC LIMIT $3`
	}
	return `SELECT ` + pgMessageCols + ` FROM messages WHERE ` + pgSessionWindow + ` ORDER BY session_id DESC, id DESC LIMIT $3`
}

func (p *PG) listBefore(ctx context.Context, op, sessionID string, beforeID uint64, limit int, dialog bool) ([]Message, error) {
	return pgPageBefore(ctx, p, op, pgListBeforeSQL(dialog), sessionID, beforeID, limit, scanMessage)
}

// pgPageBefore runs a backward page query ($1 session, $2 exclusive upper id bound, $3 limit,
// newest first) and returns its rows in ascending id order. limit ≤ 0 is ErrInvalid; an empty page
// of an unknown session is ErrNotFound.
func pgPageBefore[T any](ctx context.Context, p *PG, op, sql, sessionID string, beforeID uint64, limit int, scan func(pgx.Row) (T, error)) ([]T, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("store: %s: %w: limit must be positive", op, ErrInvalid)
	}
	before := int64(math.MaxInt64)
	if beforeID != 0 {
		before = i64(beforeID)
	}
	out := []T{}
	err := p.q(ctx, op, func(q pgq) error {
		rows, err := q.Query(ctx, sql, sessionID, before, limit)
		if err != nil {
			return err
		}
		if out, err = collect(rows, out, scan); err != nil {
			return err
		}
		if len(out) == 0 {
			return sessionExists(ctx, q, sessionID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// ListRunMessages returns the messages of one run in ascending id order (empty for an unknown
// run).
func (p *PG) ListRunMessages(ctx context.Context, runID string) ([]Message, error) {
	out := []Message{}
	if runID == "" {
		return out, nil // messages without a run are not a run's
	}
	err := p.q(ctx, "list run messages", func(q pgq) error {
		rows, err := q.Query(ctx, `SELECT `+pgMessageCols+` FROM messages WHERE run_id = $1 AND run_id <> '' ORDER BY id`, runID)
		if err != nil {
			return err
		}
		out, err = collect(rows, out, scanMessage)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LastMessageID returns the id of a session's newest message, 0 when it has none.
func (p *PG) LastMessageID(ctx context.Context, sessionID string) (uint64, error) {
	var id *int64
	err := p.q(ctx, "last message id", func(q pgq) error {
		// max(id) … WHERE session_id = $1 can be planned as a filtered backward walk of the
		// primary key; the window reads the session's index instead (see pgSessionWindow).
		err := q.QueryRow(ctx, `SELECT id FROM messages WHERE `+pgSessionWindow+` ORDER BY session_id DESC, id DESC LIMIT 1`,
			sessionID, int64(math.MaxInt64)).Scan(&id)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if id == nil {
			return sessionExists(ctx, q, sessionID)
		}
		return nil
	})
	if err != nil || id == nil {
		return 0, err
	}
	return uint64(*id), nil
}

// MergeMetadata merges patch into one message's metadata (see Store.MergeMetadata). The message
// row is locked for the read-merge-write, so concurrent merges lose no key.
func (p *PG) MergeMetadata(ctx context.Context, id uint64, patch map[string]json.RawMessage) error {
	compacted := make(map[string]json.RawMessage, len(patch))
	for k, v := range patch {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return fmt.Errorf("store: merge metadata: %w: value of %q is not valid JSON: %w", ErrInvalid, k, err)
		}
		compacted[k] = buf.Bytes()
	}
	return p.tx(ctx, "merge metadata", func(tx pgx.Tx) error {
		var meta *string
		if err := tx.QueryRow(ctx, `SELECT metadata FROM messages WHERE id = $1 FOR UPDATE`, i64(id)).Scan(&meta); err != nil {
			return notFound(err, "message", id)
		}
		var fields []field
		if meta != nil && len(bytes.TrimSpace([]byte(*meta))) > 0 {
			var err error
			if fields, err = parseObject([]byte(*meta)); err != nil {
				return fmt.Errorf("message %d: %w: %w", id, ErrBadMetadata, err)
			}
		}
		merged := writeObject(mergeFields(fields, compacted))
		_, err := tx.Exec(ctx, `UPDATE messages SET metadata = $2, interrupted = $3 WHERE id = $1`, i64(id), string(merged), metaInterrupted(merged))
		return err
	})
}

// Runs.

const pgRunCols = `id, session_id, channel, phase, started_at, ended_at, error, user_message_id, final_message_id,
	markers_seen, markers_kept, markers_dropped, owner, lease_until, origin`

func scanRun(row pgx.Row) (Run, error) {
	var (
		r             Run
		ended         *time.Time
		userID, final int64
		lease         *time.Time
		origin        *string
	)
	if err := row.Scan(&r.ID, &r.SessionID, &r.Channel, &r.Phase, &r.StartedAt, &ended, &r.Error, &userID, &final,
		&r.MarkersSeen, &r.MarkersKept, &r.MarkersDropped, &r.LeaseOwner, &lease, &origin); err != nil {
		return Run{}, err
	}
	if origin != nil {
		r.Origin = json.RawMessage(*origin)
	}
	r.StartedAt, r.EndedAt, r.LeaseUntil = utc(r.StartedAt), utcPtr(ended), utcPtr(lease)
	r.UserMessageID, r.FinalMessageID = uint64(userID), uint64(final)
	return r, nil
}

// leaseRun gives a prepared run this process as its owner and a fresh lease, unless the caller
// named them.
func (p *PG) leaseRun(r Run) Run {
	if r.LeaseOwner == "" {
		r.LeaseOwner = p.owner
	}
	if r.LeaseUntil.IsZero() {
		r.LeaseUntil = p.nowUTC().Add(p.lease)
	}
	return r
}

// insertRunPG stores a prepared, leased run (leaseRun); an existing ID is ErrConflict. The caller
// has checked the session.
func (p *PG) insertRunPG(ctx context.Context, q pgq, r Run) error {
	var origin *string
	if len(r.Origin) > 0 {
		o := string(r.Origin)
		origin = &o
	}
	tag, err := q.Exec(ctx, `INSERT INTO runs (id, session_id, channel, phase, started_at, error, user_message_id, final_message_id,
		markers_seen, markers_kept, markers_dropped, owner, lease_until, origin)
		VALUES ($1, $2, $3, $4, $5, '', $6, 0, $7, $8, $9, $10, $11, $12) ON CONFLICT (id) DO NOTHING`,
		r.ID, r.SessionID, r.Channel, string(r.Phase), r.StartedAt, i64(r.UserMessageID),
		r.MarkersSeen, r.MarkersKept, r.MarkersDropped, r.LeaseOwner, nullTime(r.LeaseUntil), origin)
	if err != nil {
		return fmt.Errorf("run %q: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("run %q: %w", r.ID, ErrConflict)
	}
	return nil
}

// CreateRun stores a new RUNNING run owned by this process (see Store.CreateRun).
func (p *PG) CreateRun(ctx context.Context, r Run) (Run, error) {
	r, err := p.prepareRun(r)
	if err != nil {
		return Run{}, fmt.Errorf("store: create run: %w", err)
	}
	r = p.leaseRun(r)
	err = p.tx(ctx, "create run", func(tx pgx.Tx) error {
		if err := sessionExists(ctx, tx, r.SessionID); err != nil {
			return err
		}
		return p.insertRunPG(ctx, tx, r)
	})
	if err != nil {
		return Run{}, err
	}
	return r, nil
}

// lockRunning reads a run for update and refuses one that already finished.
func lockRunning(ctx context.Context, tx pgx.Tx, id string) (Run, error) {
	r, err := scanRun(tx.QueryRow(ctx, `SELECT `+pgRunCols+` FROM runs WHERE id = $1 FOR UPDATE`, id))
	if err != nil {
		return Run{}, notFound(err, "run", id)
	}
	if r.Phase.Terminal() {
		return Run{}, fmt.Errorf("run %q already finished as %s: %w", id, r.Phase, ErrConflict)
	}
	return r, nil
}

// saveEnded writes a run's end; its lease ends with it (the caller clears r.LeaseUntil).
func saveEnded(ctx context.Context, tx pgx.Tx, r Run) error {
	_, err := tx.Exec(ctx, `UPDATE runs SET phase = $2, error = $3, final_message_id = $4, ended_at = $5,
		markers_seen = $6, markers_kept = $7, markers_dropped = $8, lease_until = NULL WHERE id = $1`,
		r.ID, string(r.Phase), r.Error, i64(r.FinalMessageID), nullTime(r.EndedAt), r.MarkersSeen, r.MarkersKept, r.MarkersDropped)
	if err != nil {
		return fmt.Errorf("run %q: %w", r.ID, err)
	}
	return nil
}

// FinishRun moves a RUNNING run to a terminal phase (see Store.FinishRun).
func (p *PG) FinishRun(ctx context.Context, id string, phase Phase, errMsg string, finalMessageID uint64) (Run, error) {
	if !phase.Terminal() {
		return Run{}, fmt.Errorf("store: finish run %q: %w: phase %q is not terminal", id, ErrInvalid, phase)
	}
	var out Run
	err := p.tx(ctx, "finish run", func(tx pgx.Tx) error {
		r, err := lockRunning(ctx, tx, id)
		if err != nil {
			return err
		}
		r.Phase, r.Error, r.FinalMessageID, r.EndedAt = phase, errMsg, finalMessageID, p.nowUTC()
		r.LeaseUntil = time.Time{}
		if err := saveEnded(ctx, tx, r); err != nil {
			return err
		}
		out = r
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	return out, nil
}

// ConcludeRun ends a RUNNING run in one transaction, with its final message (see
// Store.ConcludeRun and concludePG).
func (p *PG) ConcludeRun(ctx context.Context, c Conclusion) (Run, Message, error) {
	op := fmt.Sprintf("conclude run %q", c.RunID)
	if !c.Phase.Terminal() {
		return Run{}, Message{}, fmt.Errorf("store: %s: %w: phase %q is not terminal", op, ErrInvalid, c.Phase)
	}
	if c.MarkersSeen < 0 || c.MarkersKept < 0 || c.MarkersDropped < 0 {
		return Run{}, Message{}, fmt.Errorf("store: %s: %w: negative marker count", op, ErrInvalid)
	}
	var final Message
	if c.Final != nil {
		if c.Final.Role != RoleAssistant || len(c.Final.ToolCalls) > 0 || c.Final.RunID != c.RunID {
			return Run{}, Message{}, fmt.Errorf("store: %s: %w: the final message must be an ASSISTANT answer of this run", op, ErrInvalid)
		}
		var err error
		if final, err = p.prepareMessage(*c.Final); err != nil {
			return Run{}, Message{}, fmt.Errorf("store: %s: %w", op, err)
		}
	}
	var fp *Message
	if c.Final != nil {
		fp = &final
	}
	return p.concludePG(ctx, op, c, fp)
}

// SetRunMarkers records a run's citation marker counts.
func (p *PG) SetRunMarkers(ctx context.Context, id string, seen, kept, dropped int) error {
	if seen < 0 || kept < 0 || dropped < 0 {
		return fmt.Errorf("store: set run markers %q: %w: negative count", id, ErrInvalid)
	}
	return p.q(ctx, "set run markers", func(q pgq) error {
		tag, err := q.Exec(ctx, `UPDATE runs SET markers_seen = $2, markers_kept = $3, markers_dropped = $4 WHERE id = $1`, id, seen, kept, dropped)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("run %q: %w", id, ErrNotFound)
		}
		return err
	})
}

// GetRun returns the run with id, or ErrNotFound.
func (p *PG) GetRun(ctx context.Context, id string) (Run, error) {
	var r Run
	err := p.q(ctx, "get run", func(q pgq) error {
		var err error
		r, err = scanRun(q.QueryRow(ctx, `SELECT `+pgRunCols+` FROM runs WHERE id = $1`, id))
		return notFound(err, "run", id)
	})
	return r, err
}

// ListRuns returns a session's runs, oldest StartedAt first (ties in creation order).
func (p *PG) ListRuns(ctx context.Context, sessionID string) ([]Run, error) {
	return listInSession(ctx, p, "list runs", sessionID, scanRun, `SELECT `+pgRunCols+` FROM runs WHERE session_id = $1 ORDER BY started_at, seq`, sessionID)
}

// Dedup keys.

// markSeenPG is MarkSeen's one statement: insert the key, or take over an expired record; a live
// duplicate returns no row and changes nothing. ON CONFLICT makes it atomic across replicas: of
// two processes racing for one key exactly one gets a row back.
func markSeenPG(ctx context.Context, q pgq, key string, now time.Time, ttl time.Duration) (bool, error) {
	var one int
	err := q.QueryRow(ctx, `INSERT INTO seen (key, expires_at_ns) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET expires_at_ns = EXCLUDED.expires_at_ns WHERE seen.expires_at_ns <= $3
		RETURNING 1`, key, now.Add(ttl).UnixNano(), now.UnixNano()).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("seen %q: %w", key, err)
	}
	return true, nil
}

// MarkSeen records a chat platform's message key for ttl (see Store.MarkSeen).
func (p *PG) MarkSeen(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if key == "" {
		return false, fmt.Errorf("store: mark seen: %w: empty key", ErrInvalid)
	}
	if ttl <= 0 {
		return false, fmt.Errorf("store: mark seen: %w: ttl must be positive, got %s", ErrInvalid, ttl)
	}
	var fresh bool
	err := p.q(ctx, "mark seen", func(q pgq) error {
		var err error
		fresh, err = markSeenPG(ctx, q, key, p.now(), ttl)
		return err
	})
	return fresh, err
}

// PruneSeen deletes expired dedup keys and returns how many it removed.
func (p *PG) PruneSeen(ctx context.Context) (int, error) {
	n := 0
	err := p.q(ctx, "prune seen", func(q pgq) error {
		tag, err := q.Exec(ctx, `DELETE FROM seen WHERE expires_at_ns <= $1`, p.now().UnixNano())
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}

// UnmarkSeen forgets a message key recorded by MarkSeen.
func (p *PG) UnmarkSeen(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("store: unmark seen: %w: empty key", ErrInvalid)
	}
	return p.q(ctx, "unmark seen", func(q pgq) error {
		_, err := q.Exec(ctx, `DELETE FROM seen WHERE key = $1`, key)
		return err
	})
}

// errDuplicate rolls back AcceptInbound's transaction for a live duplicate.
var errDuplicate = errors.New("duplicate")

// AcceptInbound takes one chat-platform message in a single transaction (see
// Store.AcceptInbound). An advisory lock on the conversation key serialises the conversation's
// messages, so concurrent first messages (on any replica) share one session.
func (p *PG) AcceptInbound(ctx context.Context, in Inbound) (Accepted, error) {
	const op = "accept inbound"
	if err := checkInbound(&in); err != nil {
		return Accepted{}, fmt.Errorf("store: %s: %w", op, err)
	}
	now := p.now()
	var sess Session
	if in.Create != nil {
		var err error
		if sess, err = p.prepareSession(*in.Create); err != nil {
			return Accepted{}, fmt.Errorf("store: %s: %w", op, err)
		}
	}
	var run Run
	var user Message
	if in.Turn != nil {
		var err error
		if run, err = p.prepareRun(Run{ID: in.Turn.RunID, Channel: in.Turn.Channel, Origin: in.Turn.Origin}); err != nil {
			return Accepted{}, fmt.Errorf("store: %s: %w", op, err)
		}
		run = p.leaseRun(run)
		user = Message{RunID: run.ID, Role: RoleUser, Content: in.Turn.Text, CreatedAt: run.StartedAt}
	}
	var out Accepted
	err := p.tx(ctx, op, func(tx pgx.Tx) error {
		out = Accepted{}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('citegate.conversation:' || $1, 0))`, in.Conversation); err != nil {
			return fmt.Errorf("conversation lock: %w", err)
		}
		fresh, err := markSeenPG(ctx, tx, in.SeenKey, now, in.SeenTTL)
		if err != nil {
			return err
		}
		if !fresh {
			return errDuplicate
		}
		var bound string
		err = tx.QueryRow(ctx, `SELECT session_id FROM conversations WHERE key = $1`, in.Conversation).Scan(&bound)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("conversation %q: %w", in.Conversation, err)
		}
		if bound != "" && !in.Fresh {
			out.SessionID = bound
		} else if in.Create != nil {
			if err := insertSessionPG(ctx, tx, sess); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO conversations (key, session_id) VALUES ($1, $2)
				ON CONFLICT (key) DO UPDATE SET session_id = EXCLUDED.session_id`, in.Conversation, sess.ID); err != nil {
				return fmt.Errorf("bind conversation %q: %w", in.Conversation, err)
			}
			out.SessionID, out.SessionCreated = sess.ID, true
		}
		if in.Turn == nil {
			return nil
		}
		if out.SessionID == "" {
			return fmt.Errorf("conversation %q has no session: %w", in.Conversation, ErrNotFound)
		}
		u := user
		u.SessionID = out.SessionID
		m, err := p.appendPG(ctx, tx, u)
		if err != nil {
			return err
		}
		r := run
		r.SessionID, r.UserMessageID = out.SessionID, m.ID
		if err := p.insertRunPG(ctx, tx, r); err != nil {
			return err
		}
		out.Run, out.UserMessage = r, m
		return nil
	})
	if errors.Is(err, errDuplicate) {
		return Accepted{Duplicate: true}, nil
	}
	if err != nil {
		return Accepted{}, err
	}
	return out, nil
}

// GetToolResult returns the first TOOL message of run runID that answers tool call callID, or
// ErrNotFound. The run's index (messages_run_idx) bounds the read to the run's rows.
func (p *PG) GetToolResult(ctx context.Context, runID, callID string) (Message, error) {
	var m Message
	if runID == "" || callID == "" {
		return m, fmt.Errorf("tool result %q of run %q: %w", callID, runID, ErrNotFound)
	}
	err := p.q(ctx, "get tool result", func(q pgq) error {
		var err error
		m, err = scanMessage(q.QueryRow(ctx, `SELECT `+pgMessageCols+` FROM messages
			WHERE run_id = $1 AND run_id <> '' AND role = $3 AND tool_call_id = $2 ORDER BY id LIMIT 1`, runID, callID, string(RoleTool)))
		return notFound(err, "tool result", runID+"/"+callID)
	})
	return m, err
}

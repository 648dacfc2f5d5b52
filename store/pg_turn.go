package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The per-turn write path on PostgreSQL (see turn.go for bbolt). Each method is one statement sent
// in one round trip and committed as PostgreSQL's implicit transaction, instead of BEGIN, one
// statement per row and COMMIT: with the database on another machine (or busy on this one) a
// turn's latency is mostly round trips. The data-modifying CTEs keep appendPG's ordering rule: the
// session row is updated (and so locked) before the message ids are drawn, because the INSERT
// reads its rows from the UPDATE.

// pgStartTurnSQL inserts the USER message and the RUNNING run pointing at it. $1 session, $2 now
// (the session's UpdatedAt), $3 run id, $4 content, $5 metadata, $6 created_at, $7 interrupted,
// $8 channel, $9 started_at, $10 owner, $11 lease_until, $12 origin. No row back: no such
// session. An existing run id fails the statement (unique violation), so nothing is written.
const pgStartTurnSQL = `WITH s AS (
	UPDATE sessions SET updated_at = GREATEST(updated_at, $2) WHERE id = $1 RETURNING id
), m AS (
	INSERT INTO messages (session_id, run_id, role, kind, content, tool_calls, tool_call_id, tool_name, metadata, created_at, interrupted)
	SELECT s.id, $3, 'USER', 'u', $4, '', '', '', $5, $6, $7 FROM s RETURNING id
), r AS (
	INSERT INTO runs (id, session_id, channel, phase, started_at, error, user_message_id, final_message_id,
		markers_seen, markers_kept, markers_dropped, owner, lease_until, origin)
	SELECT $3, $1, $8, 'RUNNING', $9, '', m.id, 0, 0, 0, 0, $10, $11, $12 FROM m RETURNING id
)
SELECT m.id FROM m, r`

// StartTurn stores the USER message and the RUNNING run of a turn in one statement (see
// Store.StartTurn). The run is owned by this process with a fresh lease unless r names them.
func (p *PG) StartTurn(ctx context.Context, m Message, r Run) (Message, Run, error) {
	m, r, err := p.prepareTurn(m, r)
	if err != nil {
		return Message{}, Run{}, fmt.Errorf("store: start turn: %w", err)
	}
	r = p.leaseRun(r)
	var origin, meta *string
	if len(r.Origin) > 0 {
		o := string(r.Origin)
		origin = &o
	}
	if m.Metadata != nil {
		s := string(m.Metadata)
		meta = &s
	}
	var id int64
	err = p.q(ctx, "start turn", func(q pgq) error {
		err := q.QueryRow(ctx, pgStartTurnSQL, m.SessionID, p.nowUTC(), r.ID, m.Content, meta, m.CreatedAt, metaInterrupted(m.Metadata),
			r.Channel, r.StartedAt, r.LeaseOwner, nullTime(r.LeaseUntil), origin).Scan(&id)
		switch {
		case isUniqueViolation(err):
			return fmt.Errorf("run %q: %w", r.ID, ErrConflict)
		case err != nil:
			return notFound(err, "session", m.SessionID)
		}
		return nil
	})
	if err != nil {
		return Message{}, Run{}, err
	}
	m.ID = uint64(id)
	r.UserMessageID = m.ID
	return m, r, nil
}

// pgAppendMessagesSQL appends a batch of one session's messages given as parallel arrays, in array
// order. $1 session, $2 now; $3… the columns. Identity values are drawn as the ordered rows reach
// the INSERT, so ascending ids follow the array order.
const pgAppendMessagesSQL = `WITH s AS (
	UPDATE sessions SET updated_at = GREATEST(updated_at, $2) WHERE id = $1 RETURNING id
)
INSERT INTO messages (session_id, run_id, role, kind, content, tool_calls, tool_call_id, tool_name, metadata, created_at, interrupted)
SELECT s.id, u.run_id, u.role, u.kind, u.content, u.tool_calls, u.tool_call_id, u.tool_name, u.metadata, u.created_at, u.interrupted
FROM s, unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::boolean[])
	WITH ORDINALITY AS u(run_id, role, kind, content, tool_calls, tool_call_id, tool_name, metadata, created_at, interrupted, ord)
ORDER BY u.ord
RETURNING id`

// AppendMessages stores a batch of one session's messages in one statement (see
// Store.AppendMessages).
func (p *PG) AppendMessages(ctx context.Context, ms []Message) ([]Message, error) {
	in, err := p.prepareMessages(ms)
	if err != nil {
		return nil, fmt.Errorf("store: append messages: %w", err)
	}
	if len(in) == 0 {
		return []Message{}, nil
	}
	n := len(in)
	var (
		runIDs, roles, kinds, contents = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		calls, callIDs, toolNames      = make([]string, n), make([]string, n), make([]string, n)
		metas                          = make([]*string, n)
		created                        = make([]time.Time, n)
		interrupted                    = make([]bool, n)
	)
	for i, m := range in {
		runIDs[i], roles[i], kinds[i], contents[i] = m.RunID, string(m.Role), string(rune(kindOf(m))), m.Content
		if len(m.ToolCalls) > 0 {
			raw, err := encodeJSON(m.ToolCalls)
			if err != nil {
				return nil, fmt.Errorf("store: append messages: encode tool calls: %w", err)
			}
			calls[i] = string(raw)
		}
		callIDs[i], toolNames[i] = m.ToolCallID, m.ToolName
		if m.Metadata != nil {
			s := string(m.Metadata)
			metas[i] = &s
		}
		created[i], interrupted[i] = m.CreatedAt, metaInterrupted(m.Metadata)
	}
	var ids []int64
	err = p.q(ctx, "append messages", func(q pgq) error {
		rows, err := q.Query(ctx, pgAppendMessagesSQL, in[0].SessionID, p.nowUTC(),
			runIDs, roles, kinds, contents, calls, callIDs, toolNames, metas, created, interrupted)
		if err != nil {
			return err
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("session %q: %w", in[0].SessionID, ErrNotFound)
		}
		if len(ids) != n {
			return fmt.Errorf("%d of %d messages stored", len(ids), n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// RETURNING order is not promised; the ids themselves are, ascending in array order.
	slices.Sort(ids)
	for i := range in {
		in[i].ID = uint64(ids[i])
	}
	return in, nil
}

// pgDialogLinesSQL is ListDialogLinesBefore's page query: ListDialogBefore's (pgListBeforeSQL)
// without metadata, tool calls or times.
const pgDialogLinesSQL = `SELECT id, run_id, role, content, interrupted FROM messages WHERE ` + pgSessionWindow +
	` AND kind IN ('u', 'a') ORDER BY session_id DESC, id DESC LIMIT $3`

// ListDialogLinesBefore returns the dialog lines of a session's newest USER messages and
// ASSISTANT answers below beforeID (see Store.ListDialogLinesBefore).
func (p *PG) ListDialogLinesBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]DialogLine, error) {
	return pgPageBefore(ctx, p, "list dialog lines before", pgDialogLinesSQL, sessionID, beforeID, limit, scanDialogLine)
}

func scanDialogLine(row pgx.Row) (DialogLine, error) {
	var (
		l  DialogLine
		id int64
	)
	if err := row.Scan(&id, &l.RunID, &l.Role, &l.Content, &l.Interrupted); err != nil {
		return DialogLine{}, err
	}
	l.ID = uint64(id)
	return l, nil
}

// The statements of concludePG, sent as one batch. Every write is guarded by the run being
// RUNNING (and, with a final message, of the message's session), so when the run is missing,
// finished or of another session nothing changes, and the first statement's row says why.
const (
	// $1 run.
	pgConcludeLockSQL = `SELECT phase, session_id FROM runs WHERE id = $1 FOR UPDATE`
	// $1 run, $2 now, $3 session.
	pgConcludeSessionSQL = `UPDATE sessions SET updated_at = GREATEST(updated_at, $2) WHERE id = $3
		AND EXISTS (SELECT 1 FROM runs WHERE id = $1 AND phase = 'RUNNING' AND session_id = $3)`
	// $1 run, $2 session, $3 content, $4 metadata, $5 created_at, $6 interrupted.
	pgConcludeMessageSQL = `INSERT INTO messages (session_id, run_id, role, kind, content, tool_calls, tool_call_id, tool_name, metadata, created_at, interrupted)
		SELECT $2, $1, 'ASSISTANT', 'a', $3, '', '', '', $4, $5, $6
		WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1 AND phase = 'RUNNING' AND session_id = $2) RETURNING id`
	// $1 run, $2 phase, $3 error, $4 ended_at, $5-$7 marker counts, $8 with a final message, $9 its
	// session. The final message is the run's newest: the INSERT above drew its id while holding
	// the session row, after every earlier message of the run.
	pgConcludeRunSQL = `UPDATE runs SET phase = $2, error = $3, ended_at = $4, markers_seen = $5, markers_kept = $6, markers_dropped = $7,
		lease_until = NULL,
		final_message_id = CASE WHEN $8 THEN coalesce((SELECT max(id) FROM messages WHERE run_id = $1 AND run_id <> ''), 0) ELSE 0 END
		WHERE id = $1 AND phase = 'RUNNING' AND (NOT $8 OR session_id = $9) RETURNING ` + pgRunCols
)

// concludePG is ConcludeRun's transaction as one batch: PostgreSQL runs a batch's statements in
// one implicit transaction (all or nothing), so the run's end costs one round trip instead of six
// (BEGIN, lock, session, message, run, COMMIT). The run row is locked before the session row, as
// lockRunning and appendPG did.
func (p *PG) concludePG(ctx context.Context, op string, c Conclusion, final *Message) (Run, Message, error) {
	if err := ctx.Err(); err != nil {
		return Run{}, Message{}, fmt.Errorf("store: %s: %w", op, err)
	}
	now := p.nowUTC()
	b := &pgx.Batch{}
	b.Queue(pgConcludeLockSQL, c.RunID)
	session := ""
	if final != nil {
		session = final.SessionID
		var meta *string
		if final.Metadata != nil {
			s := string(final.Metadata)
			meta = &s
		}
		b.Queue(pgConcludeSessionSQL, c.RunID, now, session)
		b.Queue(pgConcludeMessageSQL, c.RunID, session, final.Content, meta, final.CreatedAt, metaInterrupted(final.Metadata))
	}
	b.Queue(pgConcludeRunSQL, c.RunID, string(c.Phase), c.Error, now, c.MarkersSeen, c.MarkersKept, c.MarkersDropped, final != nil, session)

	var (
		run   Run
		msg   Message
		phase Phase
		runSD string
	)
	err := func() (err error) {
		br := p.pool.SendBatch(ctx, b)
		defer func() {
			// Close reports the commit's own failure.
			if cerr := br.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}()
		if err := br.QueryRow().Scan(&phase, &runSD); err != nil {
			return notFound(err, "run", c.RunID)
		}
		if phase.Terminal() {
			return fmt.Errorf("run %q already finished as %s: %w", c.RunID, phase, ErrConflict)
		}
		if final != nil && runSD != session {
			return fmt.Errorf("%w: final message of session %q for a run of session %q", ErrInvalid, session, runSD)
		}
		if final != nil {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("session %q: %w", session, err)
			}
			var id int64
			if err := br.QueryRow().Scan(&id); err != nil {
				return fmt.Errorf("insert message: %w", err)
			}
			msg = *final
			msg.ID = uint64(id)
		}
		if run, err = scanRun(br.QueryRow()); err != nil {
			return fmt.Errorf("run %q: %w", c.RunID, err)
		}
		return nil
	}()
	if err != nil {
		return Run{}, Message{}, fmt.Errorf("store: %s: %w", op, err)
	}
	return run, msg, nil
}

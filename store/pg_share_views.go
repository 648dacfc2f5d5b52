package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Share coverage and views on PostgreSQL (schema 0006_share_views.sql); the contract is on the
// bbolt twins in share_views.go.

// pgShareStatsCols are the ShareStats columns, in pgShareRow order after the share's own.
const pgShareStatsCols = `messages, watermark_at, views, last_viewed_at`

// pgShareRow scans and writes the pgShareCols of one share.
type pgShareRow struct {
	sh          Share
	wm, views   int64
	msgs        int32
	wmAt, lastV *time.Time
}

func (r *pgShareRow) dest() []any {
	return []any{&r.sh.TokenHash, &r.sh.SessionID, &r.sh.OwnerID, &r.wm, &r.sh.CreatedAt, &r.msgs, &r.wmAt, &r.views, &r.lastV}
}

func (r *pgShareRow) share() Share {
	sh := r.sh
	sh.Watermark, sh.CreatedAt = uint64(r.wm), utc(sh.CreatedAt)
	sh.Messages, sh.WatermarkAt = int(r.msgs), utcPtr(r.wmAt)
	sh.Views, sh.LastViewedAt = uint64(max(r.views, 0)), utcPtr(r.lastV)
	return sh
}

func pgShareRowOf(sh Share) pgShareRow {
	return pgShareRow{sh: sh, wm: i64(sh.Watermark), views: i64(sh.Views), msgs: int32(min(sh.Messages, 1<<31-1)),
		wmAt: nullTime(sh.WatermarkAt), lastV: nullTime(sh.LastViewedAt)}
}

// values are the pgShareCols of the row, for an INSERT.
func (r pgShareRow) values() []any {
	return []any{r.sh.TokenHash, r.sh.SessionID, r.sh.OwnerID, r.wm, r.sh.CreatedAt, r.msgs, r.wmAt, r.views, r.lastV}
}

// pgShareCoverage counts the dialog messages of sessionID up to watermark (the partial index
// messages_dialog_idx) and reads the watermark message's time.
func pgShareCoverage(ctx context.Context, q pgq, sessionID string, watermark uint64) (int, time.Time, error) {
	var (
		n  int32
		at *time.Time
	)
	err := q.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM messages WHERE (session_id, id) <= ($1, $2) AND (session_id, id) > ($1, 0) AND kind IN ('u', 'a')),
		(SELECT created_at FROM messages WHERE id = $2 AND session_id = $1)`, sessionID, i64(watermark)).Scan(&n, &at)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("share coverage: %w", err)
	}
	return int(n), utcPtr(at), nil
}

// AddShareViews adds a batch of views in one statement; see the bbolt twin.
func (p *PG) AddShareViews(ctx context.Context, views []ShareViews) error {
	views = mergeShareViews(views)
	if len(views) == 0 {
		return nil
	}
	ids := make([]string, len(views))
	counts := make([]int64, len(views))
	lasts := make([]time.Time, len(views))
	for i, v := range views {
		ids[i], counts[i], lasts[i] = v.ID, i64(v.Count), v.Last
	}
	return p.tx(ctx, "add share views", func(tx pgx.Tx) error {
		// Lock the rows in id order first: an UPDATE … FROM joins in whatever order its plan
		// likes, and two replicas' batches naming the same shares in different orders would
		// deadlock.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM shares WHERE token_hash = ANY($1::text[]) ORDER BY token_hash COLLATE "C" FOR UPDATE`, ids); err != nil {
			return err
		}
		// One row per id (merged above), so each share is updated once; GREATEST ignores the NULL
		// of a share never viewed before.
		_, err := tx.Exec(ctx, `UPDATE shares sh SET views = sh.views + v.n, last_viewed_at = GREATEST(sh.last_viewed_at, v.t)
			FROM unnest($1::text[], $2::bigint[], $3::timestamptz[]) AS v(id, n, t)
			WHERE sh.token_hash = v.id`, ids, counts, lasts)
		return err
	})
}

// AdvanceShare moves ownerID's share id forward to watermark; see the bbolt twin.
func (p *PG) AdvanceShare(ctx context.Context, id, ownerID string, watermark uint64) (Share, error) {
	var sh Share
	err := p.tx(ctx, "advance share", func(tx pgx.Tx) error {
		cur, err := scanShare(tx.QueryRow(ctx, `SELECT `+pgShareCols+` FROM shares WHERE token_hash = $1 AND owner_id = $2 FOR UPDATE`, id, ownerID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("share: %w", ErrNotFound) // never echo the key
		}
		if err != nil {
			return err
		}
		if watermark < cur.Watermark {
			return fmt.Errorf("share: %w: watermark %d is below the share's %d", ErrInvalid, watermark, cur.Watermark)
		}
		var one int
		err = tx.QueryRow(ctx, `SELECT 1 FROM messages WHERE id = $1 AND session_id = $2`, i64(watermark), cur.SessionID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("share: %w: message %d is not in the shared session", ErrInvalid, watermark)
		}
		if err != nil {
			return err
		}
		msgs, at, err := pgShareCoverage(ctx, tx, cur.SessionID, watermark)
		if err != nil {
			return err
		}
		cur.Watermark, cur.Messages, cur.WatermarkAt = watermark, msgs, at
		r := pgShareRowOf(cur)
		if _, err := tx.Exec(ctx, `UPDATE shares SET watermark = $2, messages = $3, watermark_at = $4 WHERE token_hash = $1`,
			id, r.wm, r.msgs, r.wmAt); err != nil {
			return err
		}
		sh = cur
		return nil
	})
	if err != nil {
		return Share{}, err
	}
	return sh, nil
}

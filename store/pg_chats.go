package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DeleteChat deletes one of userID's sessions with its messages, runs, share links and
// conversation bindings in one transaction (see Store.DeleteChat).
func (p *PG) DeleteChat(ctx context.Context, sessionID, userID string) (int, error) {
	revoked := 0
	err := p.tx(ctx, "delete chat", func(tx pgx.Tx) error {
		var owner string
		if err := tx.QueryRow(ctx, `SELECT user_id FROM sessions WHERE id = $1 FOR UPDATE`, sessionID).Scan(&owner); err != nil {
			return notFound(err, "session", sessionID)
		}
		if owner != userID {
			return fmt.Errorf("session %q: %w", sessionID, ErrNotFound)
		}
		for _, sql := range []string{
			`DELETE FROM messages WHERE session_id = $1`,
			`DELETE FROM runs WHERE session_id = $1`,
			`DELETE FROM conversations WHERE session_id = $1`,
		} {
			if _, err := tx.Exec(ctx, sql, sessionID); err != nil {
				return err
			}
		}
		// Only a session's owner can share it, so the owner's shares are all of them.
		tag, err := tx.Exec(ctx, `DELETE FROM shares WHERE session_id = $1 AND owner_id = $2`, sessionID, userID)
		if err != nil {
			return fmt.Errorf("revoke shares: %w", err)
		}
		revoked = int(tag.RowsAffected())
		_, err = tx.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, sessionID)
		return err
	})
	if err != nil {
		return 0, err
	}
	return revoked, nil
}

// searchPage is how many index entries one query of SearchSessions reads from a session.
const searchPage = 256

// SearchSessions finds userID's sessions by title and conversation text (see
// Store.SearchSessions). Matching is MatchTerms in Go, not SQL, so both backends agree on what
// matches whatever the database's collation; the scan budget counts message entries the same way
// (tool traffic included), reading each session newest first in pages.
func (p *PG) SearchSessions(ctx context.Context, userID, query string, opt SearchOptions) (SearchResult, error) {
	terms, err := checkQuery(query)
	if err != nil {
		return SearchResult{}, fmt.Errorf("store: search sessions: %w", err)
	}
	opt = opt.norm()
	list, err := p.ListSessions(ctx, userID)
	if err != nil {
		return SearchResult{}, fmt.Errorf("store: search sessions: %w", err)
	}
	res := SearchResult{Hits: []SearchHit{}}
	budget := opt.MaxScan
	err = p.q(ctx, "search sessions", func(q pgq) error {
		for _, sess := range list {
			if len(res.Hits) >= opt.Limit || budget <= 0 {
				res.Truncated = true
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			hit := SearchHit{Session: sess, TitleMatch: MatchTerms(sess.Title, terms)}
			before := int64(1<<63 - 1)
		pages:
			for len(hit.Messages) < searchMessagesPerHit {
				// One row past the budget tells a spent budget with more to read (Truncated) from a
				// session that simply ended.
				lim := min(searchPage, budget+1)
				rows, err := q.Query(ctx, `SELECT `+pgMessageCols+` FROM messages WHERE `+pgSessionWindow+`
					ORDER BY session_id DESC, id DESC LIMIT $3`, sess.ID, before, lim)
				if err != nil {
					return err
				}
				page, err := collect(rows, nil, scanMessage)
				if err != nil {
					return err
				}
				for _, m := range page {
					if budget <= 0 {
						res.Truncated = true
						break pages
					}
					budget--
					before = int64(m.ID)
					if k := kindOf(m); k != kindUser && k != kindAnswer {
						continue
					}
					if MatchTerms(m.Content, terms) {
						hit.Messages = append(hit.Messages, m)
						if len(hit.Messages) >= searchMessagesPerHit {
							break pages
						}
					}
				}
				if len(page) < lim {
					break
				}
			}
			if hit.TitleMatch || len(hit.Messages) > 0 {
				res.Hits = append(res.Hits, hit)
			}
		}
		return nil
	})
	if err != nil {
		return SearchResult{}, err
	}
	return res, nil
}

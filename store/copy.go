package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"
)

// Copying a bbolt database into PostgreSQL (`citegate store copy`).
//
// Every record kind is copied in batches in the source's key order, each batch one transaction of
// INSERT … ON CONFLICT DO NOTHING. That makes the copy idempotent (a second run inserts nothing)
// and resumable (an interrupted run left whole batches behind; the next run skips what is there
// and goes on). Verification then reads every kind back from both sides in key order and compares
// counts and a SHA-256 over each record's canonical form, so a record that differs — or one the
// target holds that the source does not — is reported instead of passing silently.

// CopyKinds lists the record kinds in the order CopyToPG copies them.
var CopyKinds = []string{"users", "user_tokens", "login_codes", "web_sessions", "sessions", "conversations",
	"messages", "runs", "shares", "seen", "audit"}

// CopyOptions tunes CopyToPG.
type CopyOptions struct {
	// Batch is the number of records per transaction (default 500).
	Batch int
	// AfterBatch, when set, is called after each committed batch; an error stops the copy there,
	// as an interruption would (tests use it to interrupt a copy at a known point).
	AfterBatch func(kind string, copied int) error
}

// CopyKindReport is one record kind's line of the copy report.
type CopyKindReport struct {
	Kind     string
	Source   int    // records in the bbolt database
	Inserted int    // records this run inserted (the rest were there already)
	Target   int    // records in PostgreSQL after the copy
	Checksum string // SHA-256 of the kind's canonical records, first 16 hex digits; equal on both sides
	Match    bool   // counts and checksums agree
}

// CopyReport is what CopyToPG did, kind by kind.
type CopyReport struct {
	Kinds []CopyKindReport
}

// OK reports whether every kind verified.
func (r CopyReport) OK() bool {
	for _, k := range r.Kinds {
		if !k.Match {
			return false
		}
	}
	return len(r.Kinds) > 0
}

// ErrCopyMismatch: after copying, a record kind differs between source and target.
var ErrCopyMismatch = errors.New("copy verification failed")

// copyKind reads one kind from bbolt (in key order) and writes it to PostgreSQL.
type copyKind struct {
	name string
	// each walks the source records in key order, giving each record's insert statement and the
	// canonical value hashed for verification.
	each func(tx *bolt.Tx, fn func(sql string, args []any, canon any) error) error
	// target reads the kind back from PostgreSQL in the same order, giving canonical values.
	target func(ctx context.Context, q pgq, fn func(canon any) error) error
}

// canonTime is a time as both backends hold it once copied: UTC, microseconds.
func canonTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Round(0).UTC().Truncate(time.Microsecond)
}

type canonPair struct{ K, V string }

type canonShare struct {
	Share
	Token string
}

type canonExpiry struct {
	UserID    string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// CopyToPG copies every record of the bbolt store src into dst and verifies the result. dst may
// be empty or hold an earlier (complete or interrupted) copy of the same source; records it holds
// that differ from the source fail verification (ErrCopyMismatch) and are left as they are.
func CopyToPG(ctx context.Context, src *Store, dst *PG, opt CopyOptions) (CopyReport, error) {
	if opt.Batch <= 0 {
		opt.Batch = 500
	}
	var rep CopyReport
	for _, k := range copyKinds() {
		kr, err := copyOne(ctx, src, dst, k, opt)
		if err != nil {
			return rep, fmt.Errorf("store copy: %s: %w", k.name, err)
		}
		rep.Kinds = append(rep.Kinds, kr)
	}
	// Ids assigned later must continue after the copied ones.
	for _, table := range []string{"messages", "audit"} {
		_, err := dst.pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('`+table+`', 'id'), m, true)
			FROM (SELECT max(id) AS m FROM `+table+`) t WHERE m IS NOT NULL`)
		if err != nil {
			return rep, fmt.Errorf("store copy: advance %s ids: %w", table, err)
		}
	}
	if !rep.OK() {
		return rep, fmt.Errorf("store copy: %w (see the report)", ErrCopyMismatch)
	}
	return rep, nil
}

func copyOne(ctx context.Context, src *Store, dst *PG, k copyKind, opt CopyOptions) (CopyKindReport, error) {
	kr := CopyKindReport{Kind: k.name}
	srcSum := sha256.New()
	batch := &pgx.Batch{}
	flush := func() error {
		if batch.Len() == 0 {
			return nil
		}
		n := 0
		err := pgx.BeginFunc(ctx, dst.pool, func(tx pgx.Tx) error {
			br := tx.SendBatch(ctx, batch)
			for range batch.Len() {
				tag, err := br.Exec()
				if err != nil {
					_ = br.Close()
					return err
				}
				n += int(tag.RowsAffected())
			}
			return br.Close()
		})
		if err != nil {
			return err
		}
		kr.Inserted += n
		batch = &pgx.Batch{}
		if opt.AfterBatch != nil {
			return opt.AfterBatch(k.name, kr.Inserted)
		}
		return nil
	}
	// The source is read in one bbolt read transaction per kind; nothing writes it meanwhile
	// (the copy holds the file).
	err := src.db.View(func(tx *bolt.Tx) error {
		return k.each(tx, func(sql string, args []any, canon any) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			kr.Source++
			if err := hashCanon(srcSum, canon); err != nil {
				return err
			}
			batch.Queue(sql, args...)
			if batch.Len() >= opt.Batch {
				return flush()
			}
			return nil
		})
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return kr, err
	}
	dstSum := sha256.New()
	err = k.target(ctx, dst.pool, func(canon any) error {
		kr.Target++
		return hashCanon(dstSum, canon)
	})
	if err != nil {
		return kr, fmt.Errorf("verify: %w", err)
	}
	s, d := hex.EncodeToString(srcSum.Sum(nil)), hex.EncodeToString(dstSum.Sum(nil))
	kr.Checksum = s[:16]
	kr.Match = kr.Source == kr.Target && s == d
	if !kr.Match && s != d {
		kr.Checksum = s[:16] + "≠" + d[:16]
	}
	return kr, nil
}

func hashCanon(h hash.Hash, v any) error {
	raw, err := encodeJSON(v)
	if err != nil {
		return err
	}
	h.Write(raw)
	h.Write([]byte{'\n'})
	return nil
}

// forEachJSON decodes every record of a bucket in key order. A record that does not decode stops
// the copy: copying it silently would lose it, skipping it would too.
func forEachJSON[T any](b *bolt.Bucket, fn func(k []byte, v T) error) error {
	return b.ForEach(func(k, raw []byte) error {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("record %q does not decode: %w", k, err)
		}
		return fn(k, v)
	})
}

func copyKinds() []copyKind {
	return []copyKind{
		{
			name: "users",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				return forEachJSON(tx.Bucket(bucketUsers), func(_ []byte, u User) error {
					u.CreatedAt = canonTime(u.CreatedAt)
					return fn(`INSERT INTO users (id, name, name_key, created_at, operator, language) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
						[]any{u.ID, u.Name, strings.ToLower(u.Name), u.CreatedAt, u.Operator, u.Language}, u)
				})
			},
			target: func(ctx context.Context, q pgq, fn func(any) error) error {
				return eachRow(ctx, q, `SELECT `+pgUserCols+` FROM users ORDER BY id COLLATE "C"`, scanUser, fn)
			},
		},
		{
			name: "user_tokens",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				return tx.Bucket(bucketUserTokens).ForEach(func(k, v []byte) error {
					return fn(`INSERT INTO user_tokens (token_hash, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
						[]any{string(k), string(v)}, canonPair{string(k), string(v)})
				})
			},
			target: pairTarget(`SELECT token_hash, user_id FROM user_tokens ORDER BY token_hash COLLATE "C"`),
		},
		{
			name: "login_codes",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				return forEachJSON(tx.Bucket(bucketLoginCodes), func(k []byte, c loginCode) error {
					e := canonExpiry{UserID: c.UserID, ExpiresAt: canonTime(c.ExpiresAt)}
					return fn(`INSERT INTO login_codes (code_hash, user_id, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
						[]any{string(k), c.UserID, e.ExpiresAt}, canonPair{string(k), mustJSON(e)})
				})
			},
			target: func(ctx context.Context, q pgq, fn func(any) error) error {
				return eachRow(ctx, q, `SELECT code_hash, user_id, expires_at FROM login_codes ORDER BY code_hash COLLATE "C"`,
					func(row pgx.Row) (canonPair, error) {
						var (
							k string
							e canonExpiry
						)
						err := row.Scan(&k, &e.UserID, &e.ExpiresAt)
						e.ExpiresAt = utc(e.ExpiresAt)
						return canonPair{k, mustJSON(e)}, err
					}, fn)
			},
		},
		{
			name: "web_sessions",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				return forEachJSON(tx.Bucket(bucketWebSessions), func(k []byte, w webSession) error {
					e := canonExpiry{UserID: w.UserID, CreatedAt: canonTime(w.CreatedAt), ExpiresAt: canonTime(w.ExpiresAt)}
					return fn(`INSERT INTO web_sessions (token_hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
						[]any{string(k), w.UserID, e.CreatedAt, e.ExpiresAt}, canonPair{string(k), mustJSON(e)})
				})
			},
			target: func(ctx context.Context, q pgq, fn func(any) error) error {
				return eachRow(ctx, q, `SELECT token_hash, user_id, created_at, expires_at FROM web_sessions ORDER BY token_hash COLLATE "C"`,
					func(row pgx.Row) (canonPair, error) {
						var (
							k string
							e canonExpiry
						)
						err := row.Scan(&k, &e.UserID, &e.CreatedAt, &e.ExpiresAt)
						e.CreatedAt, e.ExpiresAt = utc(e.CreatedAt), utc(e.ExpiresAt)
						return canonPair{k, mustJSON(e)}, err
					}, fn)
			},
		},
		{
			name: "sessions",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				return forEachJSON(tx.Bucket(bucketSessions), func(_ []byte, s Session) error {
					s.CreatedAt, s.UpdatedAt = canonTime(s.CreatedAt), canonTime(s.UpdatedAt)
					return fn(`INSERT INTO sessions (`+pgSessionCols+`) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
						[]any{s.ID, s.UserID, s.Channel, s.Title, s.CreatedAt, s.UpdatedAt}, s)
				})
			},
			target: func(ctx context.Context, q pgq, fn func(any) error) error {
				return eachRow(ctx, q, `SELECT `+pgSessionCols+` FROM sessions ORDER BY id COLLATE "C"`, scanSession, fn)
			},
		},
		{
			name: "conversations",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				return tx.Bucket(bucketConversations).ForEach(func(k, v []byte) error {
					return fn(`INSERT INTO conversations (key, session_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
						[]any{string(k), string(v)}, canonPair{string(k), string(v)})
				})
			},
			target: pairTarget(`SELECT key, session_id FROM conversations ORDER BY key COLLATE "C"`),
		},
		{
			name: "messages",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				return forEachJSON(tx.Bucket(bucketMessages), func(_ []byte, m Message) error {
					m.CreatedAt = canonTime(m.CreatedAt)
					var calls string
					if len(m.ToolCalls) > 0 {
						raw, err := encodeJSON(m.ToolCalls)
						if err != nil {
							return err
						}
						calls = string(raw)
					}
					var meta *string
					if len(m.Metadata) > 0 {
						s := string(m.Metadata)
						meta = &s
					}
					return fn(`INSERT INTO messages (id, session_id, run_id, role, kind, content, tool_calls, tool_call_id, tool_name, metadata, created_at, interrupted)
						VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING`,
						[]any{i64(m.ID), m.SessionID, m.RunID, string(m.Role), string(rune(kindOf(m))), m.Content, calls,
							m.ToolCallID, m.ToolName, meta, m.CreatedAt, metaInterrupted(m.Metadata)}, m)
				})
			},
			target: func(ctx context.Context, q pgq, fn func(any) error) error {
				return eachRow(ctx, q, `SELECT `+pgMessageCols+` FROM messages ORDER BY id`, scanMessage, fn)
			},
		},
		{
			name: "runs",
			// Runs are walked through the session → runs index so that each session's runs are
			// inserted (and numbered by runs.seq) in creation order, which ListRuns uses for ties.
			// Verification reads them back in the same order.
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				runs := tx.Bucket(bucketRuns)
				return tx.Bucket(bucketSessionRuns).ForEach(func(_, id []byte) error {
					var r Run
					if err := getJSON(runs, id, "run", &r); err != nil {
						return err
					}
					r.StartedAt, r.EndedAt = canonTime(r.StartedAt), canonTime(r.EndedAt)
					return fn(`INSERT INTO runs (id, session_id, channel, phase, started_at, ended_at, error, user_message_id, final_message_id,
						markers_seen, markers_kept, markers_dropped) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING`,
						[]any{r.ID, r.SessionID, r.Channel, string(r.Phase), r.StartedAt, nullTime(r.EndedAt), r.Error,
							i64(r.UserMessageID), i64(r.FinalMessageID), r.MarkersSeen, r.MarkersKept, r.MarkersDropped}, r)
				})
			},
			target: func(ctx context.Context, q pgq, fn func(any) error) error {
				return eachRow(ctx, q, `SELECT `+pgRunCols+` FROM runs ORDER BY session_id COLLATE "C", seq`, scanRun, fn)
			},
		},
		{
			name: "shares",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				idx := tx.Bucket(bucketUserShares)
				return forEachJSON(tx.Bucket(bucketShares), func(k []byte, sh Share) error {
					sh.CreatedAt = canonTime(sh.CreatedAt)
					sh.WatermarkAt, sh.LastViewedAt = canonTime(sh.WatermarkAt), canonTime(sh.LastViewedAt)
					token := string(idx.Get(prefixKey(sh.OwnerID, k)))
					vals := pgShareRowOf(sh).values()
					vals[0] = string(k)
					return fn(`INSERT INTO shares (`+pgShareCols+`, token) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING`,
						append(vals, token), canonShare{sh, token})
				})
			},
			target: func(ctx context.Context, q pgq, fn func(any) error) error {
				return eachRow(ctx, q, `SELECT `+pgShareCols+`, token FROM shares ORDER BY token_hash COLLATE "C"`,
					func(row pgx.Row) (canonShare, error) {
						var (
							c canonShare
							r pgShareRow
						)
						err := row.Scan(append(r.dest(), &c.Token)...)
						c.Share = r.share()
						return c, err
					}, fn)
			},
		},
		{
			name: "seen",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				return tx.Bucket(bucketSeen).ForEach(func(k, v []byte) error {
					if len(v) != 8 {
						return nil // a corrupt dedup record counts as expired: nothing to keep
					}
					ns := int64(binary.BigEndian.Uint64(v))
					return fn(`INSERT INTO seen (key, expires_at_ns) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
						[]any{string(k), ns}, canonPair{string(k), fmt.Sprint(ns)})
				})
			},
			target: pairTarget(`SELECT key, expires_at_ns::text FROM seen ORDER BY key COLLATE "C"`),
		},
		{
			name: "audit",
			each: func(tx *bolt.Tx, fn func(string, []any, any) error) error {
				b := tx.Bucket(bucketAudit)
				if b == nil {
					return nil
				}
				return forEachJSON(b, func(_ []byte, e AuditEntry) error {
					e.Time = canonTime(e.Time)
					return fn(`INSERT INTO audit (id, time, actor_id, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
						[]any{i64(e.ID), e.Time, e.ActorID, e.Actor, e.Action, e.Target, e.Detail}, e)
				})
			},
			target: func(ctx context.Context, q pgq, fn func(any) error) error {
				return eachRow(ctx, q, `SELECT `+pgAuditCols+` FROM audit ORDER BY id`, scanAudit, fn)
			},
		},
	}
}

func mustJSON(v any) string {
	raw, err := encodeJSON(v)
	if err != nil {
		panic(err) // only plain structs of strings and times are passed
	}
	return string(raw)
}

func pairTarget(sql string) func(ctx context.Context, q pgq, fn func(any) error) error {
	return func(ctx context.Context, q pgq, fn func(any) error) error {
		return eachRow(ctx, q, sql, func(row pgx.Row) (canonPair, error) {
			var p canonPair
			err := row.Scan(&p.K, &p.V)
			return p, err
		}, fn)
	}
}

// eachRow streams a query's rows through scan to fn, without holding them all.
func eachRow[T any](ctx context.Context, q pgq, sql string, scan func(pgx.Row) (T, error), fn func(any) error) error {
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	return rows.Err()
}

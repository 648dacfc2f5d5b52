package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Users, credentials, shares, operators and the audit log on PostgreSQL. Each method keeps the
// contract documented on its bbolt twin (users.go, logins.go, shares.go, operators.go, audit.go).

const pgUserCols = `id, name, created_at, operator, language`

func scanUser(row pgx.Row) (User, error) {
	var u User
	if err := row.Scan(&u.ID, &u.Name, &u.CreatedAt, &u.Operator, &u.Language); err != nil {
		return User{}, err
	}
	u.CreatedAt = utc(u.CreatedAt)
	return u, nil
}

// CreateUser creates a desktop/API user and returns it with its access token.
func (p *PG) CreateUser(ctx context.Context, name string) (User, string, error) {
	return p.CreateUserRole(ctx, name, false, Actor{})
}

// CreateUserRole is CreateUser with the operator role given (and audited) at creation.
func (p *PG) CreateUserRole(ctx context.Context, name string, operator bool, by Actor) (User, string, error) {
	name = strings.TrimSpace(name)
	if err := checkUserName(name); err != nil {
		return User{}, "", fmt.Errorf("store: create user: %w", err)
	}
	u := User{ID: newID(), Name: name, CreatedAt: p.nowUTC(), Operator: operator}
	token := randToken(tokenBytes)
	err := p.tx(ctx, "create user", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO users (id, name, name_key, created_at, operator) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (name_key) DO NOTHING`, u.ID, u.Name, strings.ToLower(name), u.CreatedAt, u.Operator)
		if err != nil {
			return fmt.Errorf("user %q: %w", u.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("user name %q is already taken: %w", name, ErrConflict)
		}
		if operator {
			if _, err := p.appendAuditPG(ctx, tx, roleAudit(by, u, true, "created as operator")); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO user_tokens (token_hash, user_id) VALUES ($1, $2)`, hashToken(token), u.ID)
		return err
	})
	if err != nil {
		return User{}, "", err
	}
	return u, token, nil
}

// UserByToken returns the user whose access token is token, or ErrNotFound.
func (p *PG) UserByToken(ctx context.Context, token string) (User, error) {
	var u User
	err := p.q(ctx, "user by token", func(q pgq) error {
		if token == "" {
			return fmt.Errorf("user token: %w", ErrNotFound)
		}
		var err error
		u, err = scanUser(q.QueryRow(ctx, `SELECT u.id, u.name, u.created_at, u.operator, u.language FROM user_tokens t
			JOIN users u ON u.id = t.user_id WHERE t.token_hash = $1`, hashToken(token)))
		if errors.Is(err, pgx.ErrNoRows) {
			// The token itself never goes into an error message or a log.
			return fmt.Errorf("user token: %w", ErrNotFound)
		}
		return err
	})
	return u, err
}

// GetUser returns the user with id, or ErrNotFound.
func (p *PG) GetUser(ctx context.Context, id string) (User, error) {
	var u User
	err := p.q(ctx, "get user", func(q pgq) error {
		var err error
		u, err = scanUser(q.QueryRow(ctx, `SELECT `+pgUserCols+` FROM users WHERE id = $1`, id))
		return notFound(err, "user", id)
	})
	return u, err
}

// CountUsers returns the number of users.
func (p *PG) CountUsers(ctx context.Context) (int, error) {
	n := 0
	err := p.q(ctx, "count users", func(q pgq) error {
		return q.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&n)
	})
	return n, err
}

func userByNamePG(ctx context.Context, q pgq, name string, lock bool) (User, error) {
	name = strings.TrimSpace(name)
	sql := `SELECT ` + pgUserCols + ` FROM users WHERE name_key = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	u, err := scanUser(q.QueryRow(ctx, sql, strings.ToLower(name)))
	return u, notFound(err, "user", name)
}

// UserByName returns the user with this name (ignoring case and surrounding space), or ErrNotFound.
func (p *PG) UserByName(ctx context.Context, name string) (User, error) {
	var u User
	err := p.q(ctx, "user by name", func(q pgq) error {
		var err error
		u, err = userByNamePG(ctx, q, name, false)
		return err
	})
	return u, err
}

// ListUsers returns every user ordered by name (case-insensitive), with its state.
func (p *PG) ListUsers(ctx context.Context) ([]UserInfo, error) {
	var out []UserInfo
	err := p.q(ctx, "list users", func(q pgq) error {
		rows, err := q.Query(ctx, `SELECT u.id, u.name, u.created_at, u.operator, u.language,
			EXISTS (SELECT 1 FROM user_tokens t WHERE t.user_id = u.id),
			(SELECT count(*) FROM web_sessions w WHERE w.user_id = u.id AND w.expires_at > $1)
			FROM users u ORDER BY u.name_key COLLATE "C"`, p.nowUTC())
		if err != nil {
			return err
		}
		out, err = collect(rows, out, func(row pgx.Row) (UserInfo, error) {
			var ui UserInfo
			err := row.Scan(&ui.ID, &ui.Name, &ui.CreatedAt, &ui.Operator, &ui.Language, &ui.Active, &ui.WebSessions)
			ui.CreatedAt = utc(ui.CreatedAt)
			return ui, err
		})
		return err
	})
	return out, err
}

// deleteCredentialsPG removes every access token, web session and login code of the user.
func deleteCredentialsPG(ctx context.Context, tx pgx.Tx, userID string) error {
	for _, sql := range []string{
		`DELETE FROM user_tokens WHERE user_id = $1`,
		`DELETE FROM web_sessions WHERE user_id = $1`,
		`DELETE FROM login_codes WHERE user_id = $1`,
	} {
		if _, err := tx.Exec(ctx, sql, userID); err != nil {
			return err
		}
	}
	return nil
}

// RotateToken gives the named user a new access token; every earlier credential stops working.
func (p *PG) RotateToken(ctx context.Context, name string) (User, string, error) {
	var u User
	token := randToken(tokenBytes)
	err := p.tx(ctx, "rotate token", func(tx pgx.Tx) error {
		var err error
		if u, err = userByNamePG(ctx, tx, name, true); err != nil {
			return err
		}
		if err := deleteCredentialsPG(ctx, tx, u.ID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO user_tokens (token_hash, user_id) VALUES ($1, $2)`, hashToken(token), u.ID)
		return err
	})
	if err != nil {
		return User{}, "", err
	}
	return u, token, nil
}

// RevokeUser removes every credential of the named user.
func (p *PG) RevokeUser(ctx context.Context, name string) (User, error) {
	var u User
	err := p.tx(ctx, "revoke user", func(tx pgx.Tx) error {
		var err error
		if u, err = userByNamePG(ctx, tx, name, true); err != nil {
			return err
		}
		return deleteCredentialsPG(ctx, tx, u.ID)
	})
	if err != nil {
		return User{}, err
	}
	return u, nil
}

// lockUser checks that the user exists and locks its row, so a concurrent rotation or revocation
// waits for the credential being created (and then deletes it).
func lockUser(ctx context.Context, tx pgx.Tx, userID string) error {
	var one int
	return notFound(tx.QueryRow(ctx, `SELECT 1 FROM users WHERE id = $1 FOR UPDATE`, userID).Scan(&one), "user", userID)
}

// CreateLoginCode creates a one-time login code for the user (see Store.CreateLoginCode).
func (p *PG) CreateLoginCode(ctx context.Context, userID string, ttl time.Duration) (string, time.Time, error) {
	if ttl <= 0 || ttl > MaxLoginCodeTTL {
		ttl = MaxLoginCodeTTL
	}
	now := p.nowUTC()
	exp := now.Add(ttl)
	code := randToken(tokenBytes)
	err := p.tx(ctx, "create login code", func(tx pgx.Tx) error {
		if err := lockUser(ctx, tx, userID); err != nil {
			return err
		}
		var active bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM user_tokens WHERE user_id = $1)`, userID).Scan(&active); err != nil {
			return err
		}
		if !active {
			return fmt.Errorf("user %q: %w", userID, ErrRevoked)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM login_codes WHERE expires_at <= $1`, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO login_codes (code_hash, user_id, expires_at) VALUES ($1, $2, $3)`, hashToken(code), userID, exp)
		return err
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return code, exp, nil
}

// RedeemLoginCode exchanges a login code for a web session; the DELETE … RETURNING spends the code
// exactly once however many requests (and replicas) race for it.
func (p *PG) RedeemLoginCode(ctx context.Context, code string, sessionTTL time.Duration) (User, string, error) {
	var u User
	token := randToken(tokenBytes)
	now := p.nowUTC()
	err := p.tx(ctx, "redeem login code", func(tx pgx.Tx) error {
		if code == "" {
			return fmt.Errorf("login code: %w", ErrNotFound)
		}
		var (
			userID string
			exp    time.Time
		)
		err := tx.QueryRow(ctx, `DELETE FROM login_codes WHERE code_hash = $1 RETURNING user_id, expires_at`, hashToken(code)).Scan(&userID, &exp)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("login code: %w", ErrNotFound)
		}
		if err != nil {
			return err
		}
		if !now.Before(exp) {
			// The deletion must commit, so the expiry is reported after the transaction.
			return nil
		}
		if u, err = scanUser(tx.QueryRow(ctx, `SELECT `+pgUserCols+` FROM users WHERE id = $1`, userID)); err != nil {
			return notFound(err, "user", userID)
		}
		_, err = tx.Exec(ctx, `INSERT INTO web_sessions (token_hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
			hashToken(token), u.ID, now, now.Add(sessionTTL))
		return err
	})
	if err != nil {
		return User{}, "", err
	}
	if u.ID == "" {
		return User{}, "", fmt.Errorf("store: redeem login code: expired: %w", ErrNotFound)
	}
	return u, token, nil
}

// UserBySession returns the user of a live web session, or ErrNotFound.
func (p *PG) UserBySession(ctx context.Context, token string) (User, error) {
	var u User
	now := p.nowUTC()
	err := p.q(ctx, "user by session", func(q pgq) error {
		if token == "" {
			return fmt.Errorf("web session: %w", ErrNotFound)
		}
		var (
			userID string
			exp    time.Time
		)
		err := q.QueryRow(ctx, `SELECT user_id, expires_at FROM web_sessions WHERE token_hash = $1`, hashToken(token)).Scan(&userID, &exp)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("web session: %w", ErrNotFound)
		}
		if err != nil {
			return err
		}
		if !now.Before(exp) {
			return fmt.Errorf("web session expired: %w", ErrNotFound)
		}
		u, err = scanUser(q.QueryRow(ctx, `SELECT `+pgUserCols+` FROM users WHERE id = $1`, userID))
		return notFound(err, "user", userID)
	})
	return u, err
}

// DeleteSession ends a web session (logout) and drops expired ones.
func (p *PG) DeleteSession(ctx context.Context, token string) error {
	now := p.nowUTC()
	return p.q(ctx, "delete web session", func(q pgq) error {
		_, err := q.Exec(ctx, `DELETE FROM web_sessions WHERE token_hash = $1 OR expires_at <= $2`, hashToken(token), now)
		return err
	})
}

// CreateWebSession starts a browser session for the user and returns the session token.
func (p *PG) CreateWebSession(ctx context.Context, userID string, ttl time.Duration) (string, error) {
	token := randToken(tokenBytes)
	now := p.nowUTC()
	err := p.tx(ctx, "create web session", func(tx pgx.Tx) error {
		if err := lockUser(ctx, tx, userID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM web_sessions WHERE expires_at <= $1`, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO web_sessions (token_hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
			hashToken(token), userID, now, now.Add(ttl))
		return err
	})
	if err != nil {
		return "", err
	}
	return token, nil
}

// Shares.

const pgShareCols = `token_hash, session_id, owner_id, watermark, created_at, ` + pgShareStatsCols

func scanShare(row pgx.Row) (Share, error) {
	var r pgShareRow
	if err := row.Scan(r.dest()...); err != nil {
		return Share{}, err
	}
	return r.share(), nil
}

func (p *PG) createSharePG(ctx context.Context, tx pgx.Tx, sessionID, ownerID string, watermark uint64) (string, Share, error) {
	if err := sessionExists(ctx, tx, sessionID); err != nil {
		return "", Share{}, err
	}
	token := randToken(tokenBytes)
	sh := Share{TokenHash: hashToken(token), SessionID: sessionID, OwnerID: ownerID, Watermark: watermark, CreatedAt: p.nowUTC()}
	var err error
	if sh.Messages, sh.WatermarkAt, err = pgShareCoverage(ctx, tx, sessionID, watermark); err != nil {
		return "", Share{}, err
	}
	_, err = tx.Exec(ctx, `INSERT INTO shares (`+pgShareCols+`, token) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		append(pgShareRowOf(sh).values(), token)...)
	if err != nil {
		return "", Share{}, err
	}
	return token, sh, nil
}

// CreateShare creates a read-only share of sessionID frozen at watermark.
func (p *PG) CreateShare(ctx context.Context, sessionID, ownerID string, watermark uint64) (string, Share, error) {
	var (
		token string
		sh    Share
	)
	err := p.tx(ctx, "create share", func(tx pgx.Tx) error {
		var err error
		token, sh, err = p.createSharePG(ctx, tx, sessionID, ownerID, watermark)
		return err
	})
	if err != nil {
		return "", Share{}, err
	}
	return token, sh, nil
}

// ShareSession returns ownerID's live share of sessionID at watermark, or creates one. An advisory
// lock on (owner, session) makes look-up and creation one step across replicas, so two concurrent
// requests get the same link.
func (p *PG) ShareSession(ctx context.Context, sessionID, ownerID string, watermark uint64) (token string, sh Share, created bool, err error) {
	err = p.tx(ctx, "share session", func(tx pgx.Tx) error {
		token, sh, created = "", Share{}, false
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('citegate.share:' || $1 || chr(1) || $2, 0))`, ownerID, sessionID); err != nil {
			return fmt.Errorf("share lock: %w", err)
		}
		var r pgShareRow
		err := tx.QueryRow(ctx, `SELECT token, `+pgShareCols+` FROM shares
			WHERE owner_id = $1 AND session_id = $2 AND watermark = $3 AND token <> ''
			ORDER BY token_hash COLLATE "C" LIMIT 1`, ownerID, sessionID, i64(watermark)).Scan(
			append([]any{&token}, r.dest()...)...)
		if err == nil {
			sh = r.share()
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		token, sh, err = p.createSharePG(ctx, tx, sessionID, ownerID, watermark)
		created = err == nil
		return err
	})
	if err != nil {
		return "", Share{}, false, err
	}
	return token, sh, created, nil
}

// GetShare returns the share for token; unknown and revoked tokens are ErrNotFound.
func (p *PG) GetShare(ctx context.Context, token string) (Share, error) {
	return p.GetShareByID(ctx, hashToken(token))
}

// GetShareByID returns the live share whose id (the hex sha256 of its token) is id.
func (p *PG) GetShareByID(ctx context.Context, id string) (Share, error) {
	var sh Share
	err := p.q(ctx, "get share", func(q pgq) error {
		var err error
		sh, err = scanShare(q.QueryRow(ctx, `SELECT `+pgShareCols+` FROM shares WHERE token_hash = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("share: %w", ErrNotFound) // never echo the key
		}
		return err
	})
	return sh, err
}

// scanSessionOrZero reads six nullable session columns of an outer join.
type nullSession struct {
	id, userID, channel, title *string
	created, updated           *time.Time
}

func (n *nullSession) dest() []any {
	return []any{&n.id, &n.userID, &n.channel, &n.title, &n.created, &n.updated}
}

func (n *nullSession) session() Session {
	if n.id == nil {
		return Session{}
	}
	return Session{ID: *n.id, UserID: *n.userID, Channel: *n.channel, Title: *n.title, CreatedAt: utcPtr(n.created), UpdatedAt: utcPtr(n.updated)}
}

// ListShares returns ownerID's live shares, newest first, each with its token and session.
func (p *PG) ListShares(ctx context.Context, ownerID string) ([]ShareEntry, error) {
	out := []ShareEntry{}
	err := p.q(ctx, "list shares", func(q pgq) error {
		rows, err := q.Query(ctx, `SELECT sh.token_hash, sh.session_id, sh.owner_id, sh.watermark, sh.created_at,
			sh.messages, sh.watermark_at, sh.views, sh.last_viewed_at, sh.token,
			s.id, s.user_id, s.channel, s.title, s.created_at, s.updated_at
			FROM shares sh LEFT JOIN sessions s ON s.id = sh.session_id WHERE sh.owner_id = $1
			ORDER BY sh.created_at DESC, sh.watermark DESC, sh.token_hash COLLATE "C"`, ownerID)
		if err != nil {
			return err
		}
		out, err = collect(rows, out, func(row pgx.Row) (ShareEntry, error) {
			var (
				e  ShareEntry
				r  pgShareRow
				ns nullSession
			)
			err := row.Scan(append(append(r.dest(), &e.Token), ns.dest()...)...)
			e.Share, e.Session = r.share(), ns.session()
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RevokeShare deletes the share for token; not ownerID's share is ErrNotFound.
func (p *PG) RevokeShare(ctx context.Context, token, ownerID string) error {
	return p.revoke(ctx, hashToken(token), ownerID)
}

// RevokeShareID is RevokeShare by the share's id.
func (p *PG) RevokeShareID(ctx context.Context, id, ownerID string) error {
	return p.revoke(ctx, id, ownerID)
}

func (p *PG) revoke(ctx context.Context, hash, ownerID string) error {
	return p.q(ctx, "revoke share", func(q pgq) error {
		tag, err := q.Exec(ctx, `DELETE FROM shares WHERE token_hash = $1 AND owner_id = $2`, hash, ownerID)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("share: %w", ErrNotFound)
		}
		return err
	})
}

// Operators and the audit log.

// SetOperator gives or takes the operator role, audited in the same transaction.
func (p *PG) SetOperator(ctx context.Context, name string, operator bool, by Actor) (User, bool, error) {
	var (
		u       User
		changed bool
	)
	err := p.tx(ctx, "set operator", func(tx pgx.Tx) error {
		var err error
		changed = false
		if u, err = userByNamePG(ctx, tx, name, true); err != nil {
			return err
		}
		if u.Operator == operator {
			return nil
		}
		u.Operator = operator
		if _, err := tx.Exec(ctx, `UPDATE users SET operator = $2 WHERE id = $1`, u.ID, operator); err != nil {
			return fmt.Errorf("user %q: %w", u.ID, err)
		}
		if _, err := p.appendAuditPG(ctx, tx, roleAudit(by, u, operator, "")); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return User{}, false, err
	}
	return u, changed, nil
}

// ListAllShares returns every live share of every user, newest first, without tokens.
func (p *PG) ListAllShares(ctx context.Context) ([]OperatorShare, error) {
	out := []OperatorShare{}
	err := p.q(ctx, "list all shares", func(q pgq) error {
		rows, err := q.Query(ctx, `SELECT sh.token_hash, sh.session_id, sh.owner_id, sh.watermark, sh.created_at,
			sh.messages, sh.watermark_at, sh.views, sh.last_viewed_at,
			s.id, s.user_id, s.channel, s.title, s.created_at, s.updated_at,
			u.id, u.name, u.created_at, u.operator, u.language
			FROM shares sh LEFT JOIN sessions s ON s.id = sh.session_id LEFT JOIN users u ON u.id = sh.owner_id
			ORDER BY sh.created_at DESC, sh.token_hash COLLATE "C"`)
		if err != nil {
			return err
		}
		out, err = collect(rows, out, func(row pgx.Row) (OperatorShare, error) {
			var (
				e         OperatorShare
				r         pgShareRow
				ns        nullSession
				uid, name *string
				created   *time.Time
				op        *bool
				language  *string
			)
			dest := append(r.dest(), ns.dest()...)
			err := row.Scan(append(dest, &uid, &name, &created, &op, &language)...)
			e.Share, e.Session = r.share(), ns.session()
			if uid != nil {
				e.Owner = User{ID: *uid, Name: *name, CreatedAt: utcPtr(created), Operator: *op, Language: *language}
			}
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RevokeShareAsOperator revokes the share with id whoever owns it, audited in the same
// transaction.
func (p *PG) RevokeShareAsOperator(ctx context.Context, id string, audit AuditEntry) (Share, error) {
	var sh Share
	err := p.tx(ctx, "revoke share as operator", func(tx pgx.Tx) error {
		var err error
		sh, err = scanShare(tx.QueryRow(ctx, `DELETE FROM shares WHERE token_hash = $1 RETURNING `+pgShareCols, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("share: %w", ErrNotFound)
		}
		if err != nil {
			return err
		}
		audit.Action, audit.Target = AuditShareRevoke, id
		_, err = p.appendAuditPG(ctx, tx, audit)
		return err
	})
	if err != nil {
		return Share{}, err
	}
	return sh, nil
}

func (p *PG) appendAuditPG(ctx context.Context, q pgq, e AuditEntry) (AuditEntry, error) {
	if err := checkAudit(e); err != nil {
		return AuditEntry{}, fmt.Errorf("audit: %w", err)
	}
	e.Time = p.nowUTC()
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO audit (time, actor_id, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		e.Time, e.ActorID, e.Actor, e.Action, e.Target, e.Detail).Scan(&id)
	if err != nil {
		return AuditEntry{}, fmt.Errorf("audit: %w", err)
	}
	e.ID = uint64(id)
	return e, nil
}

// AppendAudit stores e with a new id and the store's time and returns it as stored.
func (p *PG) AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	var out AuditEntry
	// A transaction, so the identity value is drawn and committed together (ids list in order).
	err := p.tx(ctx, "append audit", func(tx pgx.Tx) error {
		var err error
		out, err = p.appendAuditPG(ctx, tx, e)
		return err
	})
	return out, err
}

const pgAuditCols = `id, time, actor_id, actor, action, target, detail`

func scanAudit(row pgx.Row) (AuditEntry, error) {
	var (
		e  AuditEntry
		id int64
	)
	err := row.Scan(&id, &e.Time, &e.ActorID, &e.Actor, &e.Action, &e.Target, &e.Detail)
	e.ID, e.Time = uint64(id), utc(e.Time)
	return e, err
}

// ListAudit returns up to limit entries older than before (0: from the newest), newest first.
func (p *PG) ListAudit(ctx context.Context, before uint64, limit int) ([]AuditEntry, error) {
	out := []AuditEntry{}
	if limit <= 0 {
		return out, nil
	}
	err := p.q(ctx, "list audit", func(q pgq) error {
		rows, err := q.Query(ctx, `SELECT `+pgAuditCols+` FROM audit WHERE ($1 = 0 OR id < $1) ORDER BY id DESC LIMIT $2`, i64(before), limit)
		if err != nil {
			return err
		}
		out, err = collect(rows, out, scanAudit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AuditSince returns up to limit entries newer than after, oldest first.
func (p *PG) AuditSince(ctx context.Context, after uint64, limit int) ([]AuditEntry, error) {
	out := []AuditEntry{}
	if limit <= 0 || after >= 1<<63-1 {
		return out, nil
	}
	err := p.q(ctx, "audit since", func(q pgq) error {
		rows, err := q.Query(ctx, `SELECT `+pgAuditCols+` FROM audit WHERE id > $1 ORDER BY id LIMIT $2`, i64(after), limit)
		if err != nil {
			return err
		}
		out, err = collect(rows, out, scanAudit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

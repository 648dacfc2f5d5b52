package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL backend.
//
// PG keeps the records of the bbolt store in one table per record kind (pgschema/*.sql) with the
// same semantics, so any number of `serve` processes can share one database. Where bbolt relies on
// its single writer, PG takes row locks: an append locks its session row, so message ids within a
// session commit in id order; a run's end locks the run row; MarkSeen is one INSERT … ON CONFLICT,
// atomic however many replicas race for a key. The conformance suite (store/storetest) runs
// against both backends.

//go:embed pgschema/*.sql
var pgSchema embed.FS

// DefaultRunLease is how long a run created by a PG store stays owned by its process without a
// renewal. A starting process recovers (marks FAILED "interrupted") only RUNNING runs whose lease
// has expired, so it never fails a live replica's run.
const DefaultRunLease = 30 * time.Second

// IsPostgresURL reports whether a --store value names a PostgreSQL database.
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// RedactURL returns a PostgreSQL URL fit for logs and summaries: the password is replaced and
// query parameters that may carry one (password, sslpassword) are dropped.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// PG is citegate's PostgreSQL-backed persistence. It is safe for concurrent use, by several
// goroutines and by several processes sharing the database.
type PG struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	clock
	desc      string
	owner     string
	lease     time.Duration
	recovered int
}

var _ Backend = (*PG)(nil)

// OpenPG connects to the PostgreSQL database at connURL (postgres://… or postgresql://…, the
// libpq forms pgx accepts), applies the embedded schema migrations (in one transaction under an
// advisory lock, so several processes starting at once migrate once), and recovers runs whose lease
// expired (see recoverExpiredRuns). A connection attempt waits connect_timeout from the URL, else
// 10 s.
func OpenPG(ctx context.Context, connURL string, opt Options) (*PG, error) {
	desc := RedactURL(connURL)
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	// Options.Timeout is bbolt's lock wait; a connection's timeout comes from the URL
	// (connect_timeout) or this default.
	const connectTimeout = 10 * time.Second
	if opt.RunLease <= 0 {
		opt.RunLease = DefaultRunLease
	}
	if opt.Owner == "" {
		host, _ := os.Hostname()
		opt.Owner = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), randToken(6))
	}
	cfg, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		// pgx's message may quote the URL; say only which one without its secrets.
		return nil, fmt.Errorf("store: open %s: malformed PostgreSQL URL: %w", desc, ErrInvalid)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", desc, err)
	}
	p := &PG{pool: pool, log: opt.Logger, clock: clock{now: opt.Now, res: time.Microsecond},
		desc: desc, owner: opt.Owner, lease: opt.RunLease}
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout+30*time.Second)
	defer cancel()
	if err := p.migrate(cctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: open %s: %w", desc, err)
	}
	if opt.SkipRunRecovery {
		return p, nil
	}
	n, err := p.recoverExpiredRuns(cctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: open %s: %w", desc, err)
	}
	p.recovered = n
	if n > 0 {
		p.log.Warn("store: runs whose owner stopped renewing them marked FAILED", "store", desc, "runs", n)
	}
	return p, nil
}

// pgMigration is one embedded schema file, NNNN_name.sql, applied in number order.
type pgMigration struct {
	version int
	name    string
	sql     string
}

func pgMigrations() ([]pgMigration, error) {
	entries, err := fs.ReadDir(pgSchema, "pgschema")
	if err != nil {
		return nil, err
	}
	var out []pgMigration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("schema file %s is not named NNNN_name.sql", e.Name())
		}
		raw, err := pgSchema.ReadFile(path.Join("pgschema", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, pgMigration{version: v, name: e.Name(), sql: string(raw)})
	}
	slices.SortFunc(out, func(a, b pgMigration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("schema files skip or repeat version %d", i+1)
		}
	}
	return out, nil
}

// PGSchemaVersion is the newest schema version this citegate writes.
func PGSchemaVersion() int {
	ms, err := pgMigrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// migrate applies the schema files newer than the database's version in one transaction. The
// advisory lock is keyed by the schema the tables live in, so processes starting at once against
// one database wait for each other and the second finds the work done.
func (p *PG) migrate(ctx context.Context) error {
	ms, err := pgMigrations()
	if err != nil {
		return fmt.Errorf("embedded schema: %w", err)
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var schema *string
		if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return fmt.Errorf("read current schema: %w", err)
		}
		if schema == nil {
			return fmt.Errorf("%w: the search_path names no existing schema", ErrInvalid)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('citegate.schema:' || $1, 0))`, *schema); err != nil {
			return fmt.Errorf("schema lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS citegate_schema (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("schema version table: %w", err)
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM citegate_schema`).Scan(&have); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if have > len(ms) {
			return fmt.Errorf("database schema version %d is newer than this citegate supports (%d): "+
				"upgrade citegate or use a different database", have, len(ms))
		}
		for _, m := range ms[have:] {
			// Exec without arguments uses the simple protocol, which runs a file of statements.
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("apply schema %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO citegate_schema (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return fmt.Errorf("record schema %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// recoverExpiredRuns marks FAILED "interrupted" every RUNNING run whose lease has expired (or that
// never had one, e.g. copied from bbolt), and every RUNNING run of this process's own owner name: a
// process that is starting runs nothing yet, so a run under its name was left by its previous
// life. A live replica keeps its runs' leases in the future, so its runs are left alone. Owner
// names must therefore be unique among live processes (the default is random per process).
func (p *PG) recoverExpiredRuns(ctx context.Context) (int, error) {
	now := p.nowUTC()
	tag, err := p.pool.Exec(ctx, `UPDATE runs SET phase = 'FAILED', error = 'interrupted', ended_at = $1, lease_until = NULL
		WHERE phase = 'RUNNING' AND (owner = $2 OR lease_until IS NULL OR lease_until < $1)`, now, p.owner)
	if err != nil {
		return 0, fmt.Errorf("recover runs: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Close releases the connection pool.
func (p *PG) Close() error {
	p.pool.Close()
	return nil
}

// String names the database without its password (for logs and the serve summary).
func (p *PG) String() string { return p.desc }

// Owner is the name this process's runs are owned under (runs.owner); RunLease is how far ahead
// CreateRun sets a new run's lease. A replica keeps its runs alive by moving lease_until forward
// for its owner name while they execute; a reaper fails RUNNING runs whose lease_until passed.
func (p *PG) Owner() string { return p.owner }

// RunLease is the lease a new run gets (Options.RunLease).
func (p *PG) RunLease() time.Duration { return p.lease }

// Pool exposes the connection pool for features built on PostgreSQL itself (LISTEN/NOTIFY fan-out
// across replicas). Records are read and written through PG's methods only.
func (p *PG) Pool() *pgxpool.Pool { return p.pool }

// Ping checks that the database answers.
func (p *PG) Ping(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// RecoveredRuns reports how many RUNNING runs OpenPG turned into FAILED "interrupted".
func (p *PG) RecoveredRuns() int { return p.recovered }

// pgq is what both a pool and a transaction offer.
type pgq interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// tx runs fn in a transaction after checking ctx; an error from fn rolls everything back.
func (p *PG) tx(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	if err := pgx.BeginFunc(ctx, p.pool, fn); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return nil
}

// q runs fn with the pool (one statement, or reads that need no snapshot) after checking ctx.
func (p *PG) q(ctx context.Context, op string, fn func(q pgq) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	if err := fn(p.pool); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return nil
}

// notFound turns pgx.ErrNoRows into ErrNotFound naming what was missing; other errors pass.
func notFound(err error, kind string, key any) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s %q: %w", kind, fmt.Sprint(key), ErrNotFound)
	}
	return err
}

// isUniqueViolation reports a unique-constraint violation (SQLSTATE 23505).
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// i64 converts an id or watermark for a bigint column. Ids beyond int64 cannot exist in the
// database, so they clamp to the largest value, which keeps "below id" and "above id" queries right.
func i64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// utc gives a time read from PostgreSQL (in the local zone) the stored normal form.
func utc(t time.Time) time.Time { return t.UTC() }

// utcPtr is utc for a nullable column; NULL is the zero time.
func utcPtr(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// nullTime stores the zero time as NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// schemaVersion is the layout version this code writes. Opening a file written by a newer citegate
// fails instead of silently misreading it. Version 2 added the run → messages index and the kind
// byte in session_messages values; Open fills both in for a version-1 file (migrateV2).
// Version 3 added the dialog projection (session_dialog, see dialog.go); Open builds it for an
// older file (migrateV3).
const schemaVersion = 3

// defaultTimeout bounds the wait for the file lock so a second process fails fast instead of hanging.
const defaultTimeout = time.Second

// maxIDLen bounds caller-supplied ids; they are used inside index keys.
const maxIDLen = 256

// Bucket names. Index buckets use flat composite keys "<sessionID>\x00<suffix>" rather than nested
// buckets so an empty user id or session id prefix still works and prefix scans stay cheap.
var (
	bucketMeta            = []byte("meta")
	bucketSessions        = []byte("sessions")         // session id → Session
	bucketUserSessions    = []byte("user_sessions")    // userID\x00sessionID → ""
	bucketConversations   = []byte("conversations")    // conversation key → session id
	bucketMessages        = []byte("messages")         // big-endian id → Message
	bucketSessionMessages = []byte("session_messages") // sessionID\x00 big-endian id → message kind (one byte, see kindOf)
	bucketRunMessages     = []byte("run_messages")     // runID\x00 big-endian id → kind [+ tool call id] (tool_result.go; "" before)
	bucketRuns            = []byte("runs")             // run id → Run
	bucketSessionRuns     = []byte("session_runs")     // sessionID\x00 big-endian seq → run id
	bucketRunning         = []byte("running_runs")     // run id → "" while RUNNING (crash recovery)
	bucketUsers           = []byte("users")            // user id → User
	bucketUserTokens      = []byte("user_tokens")      // sha256(token) hex → user id
	bucketUserNames       = []byte("user_names")       // lower(name) → user id
	bucketShares          = []byte("shares")           // sha256(token) hex → Share
	bucketSeen            = []byte("seen")             // dedup key → big-endian unix-nano expiry
	bucketUserShares      = []byte("user_shares")      // ownerID\x00sha256(token) hex → token (see shares.go)
	bucketAudit           = []byte("audit")            // big-endian seq → AuditEntry (see audit.go)

	allBuckets = [][]byte{
		bucketMeta, bucketSessions, bucketUserSessions, bucketConversations, bucketMessages,
		bucketSessionMessages, bucketRuns, bucketSessionRuns, bucketRunning, bucketUsers,
		bucketUserTokens, bucketUserNames, bucketShares, bucketSeen, bucketUserShares, bucketRunMessages,
		bucketAudit, bucketSessionDialog,
	}

	keySchemaVersion = []byte("schema_version")
)

// Options configures Open. The zero value is usable.
type Options struct {
	Timeout time.Duration    // how long to wait for the file lock; default 1s
	Logger  *slog.Logger     // nil discards the log
	Now     func() time.Time // injected clock; default time.Now

	// PostgreSQL only (OpenPG); bbolt ignores them.
	//
	// Owner names this process as the owner of the runs it creates (runs.owner); default
	// "<hostname>:<pid>:<random>". RunLease is how long a new run is owned without a renewal
	// (default DefaultRunLease). A process starting with an Owner name recovers the RUNNING runs
	// left under that name at once; other runs only once their lease expired.
	Owner    string
	RunLease time.Duration
	// SkipRunRecovery leaves RUNNING runs alone at open: admin commands open the database beside
	// running servers and must not judge their runs.
	SkipRunRecovery bool

	// boltDefaults opens bbolt with its own defaults instead of boltOptions' settings (tests and
	// benchmarks compare the two).
	boltDefaults bool
}

// Store is citegate's bbolt-backed persistence. It is safe for concurrent use.
type Store struct {
	db     *bolt.DB
	commit *committer // runs every write transaction after Open (commit.go)
	path   string
	log    *slog.Logger
	clock
	recovered int
}

// clock is the injected time source and the normal form of stored times. Both backends embed it,
// so the checks and defaults that prepare a record outside a transaction (prepareMessage,
// prepareSession, prepareRun) are one piece of code.
type clock struct {
	now func() time.Time
	// res is the resolution of stored times: 0 keeps nanoseconds (bbolt stores RFC 3339 text);
	// PostgreSQL's timestamptz keeps microseconds, so PG truncates to that and a value it returns
	// equals the value read back.
	res time.Duration
}

// Open opens (creating if needed) the database file at path. It creates the parent directory with
// mode 0700 and the file with mode 0600. If another process (or another Open in this process) holds
// the file, Open fails after opt.Timeout with an error wrapping ErrLocked. Runs left RUNNING by a
// crash are marked FAILED with Error "interrupted"; RecoveredRuns reports how many.
func Open(path string, opt Options) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("store: open: %w: empty database path", ErrInvalid)
	}
	if opt.Timeout <= 0 {
		opt.Timeout = defaultTimeout
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: open %s: create directory: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, boltOptions(opt))
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("store: open %s: %w after waiting %s "+
				"(is `citegate serve` running? stop it, or run admin commands while it serves so they go through it)",
				path, ErrLocked, opt.Timeout)
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Store{db: db, path: path, log: opt.Logger, clock: clock{now: opt.Now}}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.commit = newCommitter(db, opt.Logger)
	if s.recovered > 0 {
		s.log.Warn("store: runs interrupted by a previous crash marked FAILED", "path", path, "runs", s.recovered)
	}
	return s, nil
}

// init creates the buckets, checks the schema version and recovers runs a crash left RUNNING, all in
// one transaction so a failed Open changes nothing.
func (s *Store) init() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if raw := meta.Get(keySchemaVersion); raw != nil {
			v, err := strconv.Atoi(string(raw))
			if err != nil {
				return fmt.Errorf("unreadable schema version %q: %w", raw, err)
			}
			if v > schemaVersion {
				return fmt.Errorf("database schema version %d is newer than this citegate supports (%d): "+
					"upgrade citegate or use a different --data directory", v, schemaVersion)
			}
			if v < 2 {
				if err := migrateV2(tx); err != nil {
					return fmt.Errorf("upgrade schema %d → 2: %w", v, err)
				}
			}
			if v < 3 {
				if err := migrateV3(tx); err != nil {
					return fmt.Errorf("upgrade schema %d → 3: %w", v, err)
				}
			}
		}
		if err := meta.Put(keySchemaVersion, []byte(strconv.Itoa(schemaVersion))); err != nil {
			return fmt.Errorf("write schema version: %w", err)
		}
		if err := indexSharesLocked(tx); err != nil {
			return err
		}
		if err := coverSharesLocked(tx); err != nil {
			return err
		}
		n, err := s.recoverRunsLocked(tx)
		if err != nil {
			return err
		}
		s.recovered = n
		return nil
	})
}

// recoverRunsLocked turns every run still marked RUNNING into FAILED "interrupted". Only one process
// can hold the file, so a RUNNING run found at Open belongs to a process that died.
func (s *Store) recoverRunsLocked(tx *bolt.Tx) (int, error) {
	running := tx.Bucket(bucketRunning)
	runs := tx.Bucket(bucketRuns)
	var ids [][]byte
	if err := running.ForEach(func(k, _ []byte) error {
		ids = append(ids, bytes.Clone(k))
		return nil
	}); err != nil {
		return 0, fmt.Errorf("scan running runs: %w", err)
	}
	n := 0
	now := s.nowUTC()
	for _, id := range ids {
		if err := running.Delete(id); err != nil {
			return 0, fmt.Errorf("recover run %q: %w", id, err)
		}
		raw := runs.Get(id)
		if raw == nil {
			continue
		}
		var r Run
		if err := json.Unmarshal(raw, &r); err != nil {
			// A corrupt record must not keep the gateway from starting; it stays as it is and
			// GetRun reports it.
			s.log.Error("store: cannot recover corrupt run record", "run", string(id), "err", err)
			continue
		}
		if r.Phase.Terminal() {
			continue
		}
		r.Phase = PhaseFailed
		r.Error = "interrupted"
		r.EndedAt, r.LeaseUntil = now, time.Time{}
		if err := putJSON(runs, id, r); err != nil {
			return 0, fmt.Errorf("recover run %q: %w", id, err)
		}
		n++
	}
	return n, nil
}

// Close releases the database file and its lock. Writes already submitted are committed first;
// writes submitted after Close fail.
func (s *Store) Close() error {
	s.commit.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	return nil
}

// Path returns the database file path given to Open.
func (s *Store) Path() string { return s.path }

// Ping checks that the database answers a read transaction.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) == nil {
			return errors.New("meta bucket missing")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// RecoveredRuns reports how many RUNNING runs Open turned into FAILED "interrupted".
func (s *Store) RecoveredRuns() int { return s.recovered }

// nowUTC returns the injected clock's time without a monotonic reading and in UTC, so a value
// returned to the caller equals the value read back from disk.
func (c clock) nowUTC() time.Time { return c.norm(c.now()) }

// norm gives caller-supplied times the same normal form as nowUTC.
func (c clock) norm(t time.Time) time.Time {
	t = t.Round(0).UTC()
	if c.res > 0 {
		t = t.Truncate(c.res)
	}
	return t
}

// normTime gives caller-supplied times bbolt's normal form (clock.norm with nanosecond resolution).
func normTime(t time.Time) time.Time { return t.Round(0).UTC() }

// newID returns a random url-safe identifier (128 bits).
func newID() string { return randToken(16) }

// randToken returns n random bytes encoded as base64url without padding.
func randToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error since Go 1.24.
	return base64.RawURLEncoding.EncodeToString(b)
}

// hashToken returns the hex sha256 of a bearer token; only this is ever stored.
func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// checkID validates a caller-supplied id that becomes part of index keys.
func checkID(kind, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty %s id", ErrInvalid, kind)
	}
	if len(id) > maxIDLen {
		return fmt.Errorf("%w: %s id longer than %d bytes", ErrInvalid, kind, maxIDLen)
	}
	if strings.IndexByte(id, 0) >= 0 {
		return fmt.Errorf("%w: %s id contains a NUL byte", ErrInvalid, kind)
	}
	return nil
}

// u64 encodes v big-endian so byte order equals numeric order.
func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// prefixKey builds "<prefix>\x00<suffix>" index keys.
func prefixKey(prefix string, suffix []byte) []byte {
	k := make([]byte, 0, len(prefix)+1+len(suffix))
	k = append(k, prefix...)
	k = append(k, 0)
	return append(k, suffix...)
}

// scanPrefix calls fn for every key in b that starts with "<prefix>\x00", in key order, passing the
// part after the separator.
func scanPrefix(b *bolt.Bucket, prefix string, fn func(suffix, v []byte) error) error {
	p := prefixKey(prefix, nil)
	c := b.Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		if err := fn(k[len(p):], v); err != nil {
			return err
		}
	}
	return nil
}

// lastWithPrefix returns the suffix of the greatest key starting with "<prefix>\x00", or nil.
func lastWithPrefix(b *bolt.Bucket, prefix string) []byte {
	p := prefixKey(prefix, nil)
	// "<prefix>\x01" sorts right after every "<prefix>\x00…" key.
	end := append([]byte(prefix), 1)
	c := b.Cursor()
	k, _ := c.Seek(end)
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	if k == nil || !bytes.HasPrefix(k, p) {
		return nil
	}
	return k[len(p):]
}

// encodeJSON marshals v without HTML escaping so stored strings (and message metadata in particular)
// keep their bytes.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return b.Put(key, raw)
}

// getJSON decodes the record at key into v. It returns ErrNotFound when the key is absent and a
// wrapped decode error (never a panic) when the stored bytes are corrupt.
func getJSON(b *bolt.Bucket, key []byte, kind string, v any) error {
	raw := b.Get(key)
	if raw == nil {
		return fmt.Errorf("%s %q: %w", kind, key, ErrNotFound)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode %s %q: %w", kind, key, err)
	}
	return nil
}

// view runs a read transaction after checking ctx.
func (s *Store) view(ctx context.Context, op string, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	if err := s.db.View(fn); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return nil
}

// update runs fn in a write transaction of its own kind: the committer runs it exactly once, last
// in its group (commit.go). Used where fn is not safe to run twice.
func (s *Store) update(ctx context.Context, op string, fn func(tx *bolt.Tx) error) error {
	return s.write(ctx, op, true, 0, fn)
}

// batch runs fn in a write transaction shared with concurrent writes (commit.go). fn must be
// idempotent: it may run more than once (when another write of its group fails, or when it fails
// and runs again alone), and only the run that committed counts, its captured results included.
func (s *Store) batch(ctx context.Context, op string, fn func(tx *bolt.Tx) error) error {
	return s.write(ctx, op, false, 0, fn)
}

// batchSized is batch for a write of about size bytes (message contents), which bounds how much one
// shared transaction takes (maxGroupBytes).
func (s *Store) batchSized(ctx context.Context, op string, size int, fn func(tx *bolt.Tx) error) error {
	return s.write(ctx, op, false, size, fn)
}

func (s *Store) write(ctx context.Context, op string, once bool, size int, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	if err := s.commit.do(ctx, once, size, fn); err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return nil
}

package store_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/citegate/citegate/store"
	"github.com/citegate/citegate/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// PostgreSQL tests run against the database named by CITEGATE_TEST_POSTGRES (a URL, e.g.
// postgres:///citegate_test?host=/var/run/postgresql), each test in a schema of its own that is
// dropped afterwards. Without the variable they are skipped, except under CI=true where a missing
// database is a failure: CI must test both backends.
func testPostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("CITEGATE_TEST_POSTGRES")
	if u == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("CI=true but CITEGATE_TEST_POSTGRES is not set: the PostgreSQL backend must be tested in CI (.ci/run sets it)")
		}
		tb.Skip("PostgreSQL tests skipped: set CITEGATE_TEST_POSTGRES=postgres://… to run them")
	}
	return u
}

// newPGSchema creates an empty schema for one test and returns a URL whose search_path selects it.
func newPGSchema(tb testing.TB) string {
	tb.Helper()
	base := testPostgresURL(tb)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(tb, err)
	defer conn.Close(ctx)
	name := fmt.Sprintf("citegate_test_%d_%s", os.Getpid(), strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(tb.Name())))
	if len(name) > 60 {
		name = name[:60]
	}
	ident := pgx.Identifier{name}.Sanitize()
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE")
	require.NoError(tb, err)
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+ident)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+ident+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return withSearchPath(tb, base, name)
}

func withSearchPath(tb testing.TB, base, schema string) string {
	tb.Helper()
	u, err := url.Parse(base)
	require.NoError(tb, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// pgHarness runs the conformance suite on PostgreSQL, one fresh schema per test.
func pgHarness() storetest.Harness {
	return storetest.Harness{
		NewDB: func(tb testing.TB) storetest.Opener {
			u := newPGSchema(tb)
			return func(opt store.Options) (store.Backend, error) {
				if opt.Owner == "" {
					// A reopen is the same process restarted: it recovers its own runs at once, as
					// bbolt's single process does.
					opt.Owner = "conformance"
				}
				return store.OpenPG(context.Background(), u, opt)
			}
		},
		Stored: func(tb testing.TB, s store.Backend, kind, key string) bool {
			tb.Helper()
			sql := map[string]string{
				"running":     `SELECT 1 FROM runs WHERE id = $1 AND phase = 'RUNNING'`,
				"login_code":  `SELECT 1 FROM login_codes WHERE code_hash = $1`,
				"web_session": `SELECT 1 FROM web_sessions WHERE token_hash = $1`,
				"user_token":  `SELECT 1 FROM user_tokens WHERE token_hash = $1`,
				"share":       `SELECT 1 FROM shares WHERE token_hash = $1`,
			}[kind]
			require.NotEmpty(tb, sql, "unknown record kind %q", kind)
			var one int
			err := s.(*store.PG).Pool().QueryRow(context.Background(), sql, key).Scan(&one)
			if err == pgx.ErrNoRows {
				return false
			}
			require.NoError(tb, err)
			return true
		},
		Dump: func(tb testing.TB, s store.Backend) []byte {
			tb.Helper()
			pool := s.(*store.PG).Pool()
			ctx := context.Background()
			rows, err := pool.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`)
			require.NoError(tb, err)
			tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(tb, err)
			var out strings.Builder
			for _, tbl := range tables {
				rows, err := pool.Query(ctx, `SELECT t::text FROM `+pgx.Identifier{tbl}.Sanitize()+` t`)
				require.NoError(tb, err)
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(tb, err)
				for _, l := range lines {
					out.WriteString(l + "\n")
				}
			}
			return []byte(out.String())
		},
	}
}

func TestConformancePostgres(t *testing.T) { storetest.Run(t, pgHarness()) }

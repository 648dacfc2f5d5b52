package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/citegate/citegate/internal/pgtest"

	"github.com/citegate/citegate/store"
	"github.com/citegate/citegate/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// PostgreSQL tests run against the database named by CITEGATE_TEST_POSTGRES, each test in a schema
// of its own (internal/pgtest); without it they are skipped, under CI=true they fail.
func newPGSchema(tb testing.TB) string { return pgtest.Schema(tb) }

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

func TestConformancePostgres(t *testing.T) {
	pgtest.BaseURL(t) // one skip line for the suite, not one per case
	storetest.Run(t, pgHarness())
}

// BenchmarkBackends runs the same hot-path benchmarks on bbolt and on PostgreSQL in one run (the
// PostgreSQL half skips without CITEGATE_TEST_POSTGRES). See docs/benchmarks.md.
func BenchmarkBackends(b *testing.B) {
	b.Run("bolt", func(b *testing.B) { storetest.Bench(b, boltHarness()) })
	b.Run("postgres", func(b *testing.B) { storetest.Bench(b, pgHarness()) })
}

// BenchmarkTurn runs storetest.BenchTurn (a turn's writes in five and in three transactions, the
// history window from whole messages and from dialog lines) on bbolt and on PostgreSQL in one run.
func BenchmarkTurn(b *testing.B) {
	b.Run("bolt", func(b *testing.B) { storetest.BenchTurn(b, boltHarness()) })
	b.Run("bolt-defaults", func(b *testing.B) { storetest.BenchTurn(b, boltDefaultsHarness()) })
	b.Run("postgres", func(b *testing.B) { storetest.BenchTurn(b, pgHarness()) })
}

package store

import (
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Hooks for the conformance harness in package store_test (bolt_conformance_test.go), which
// cannot reach the bbolt internals itself.

// CheckBolt runs bbolt's page-level consistency check.
func CheckBolt(tb testing.TB, s Backend) { checkConsistency(tb, s.(*Store)) }

// BoltDump returns every key and value of every bucket: the live records, not freed pages.
func BoltDump(tb testing.TB, s Backend) []byte {
	tb.Helper()
	var out []byte
	if err := s.(*Store).db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				out = append(append(append(append(out, name...), ' '), k...), ' ')
				out = append(append(out, v...), '\n')
				return nil
			})
		})
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// BoltStored reports whether a bucket of the record kind holds key (see storetest.Harness.Stored).
func BoltStored(tb testing.TB, s Backend, kind, key string) bool {
	tb.Helper()
	bucket := map[string][]byte{
		"running":     bucketRunning,
		"login_code":  bucketLoginCodes,
		"web_session": bucketWebSessions,
		"user_token":  bucketUserTokens,
		"share":       bucketShares,
	}[kind]
	if bucket == nil {
		tb.Fatalf("unknown record kind %q", kind)
	}
	var found bool
	if err := s.(*Store).db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bucket).Get([]byte(key)) != nil
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return found
}

// PGListBeforeSQL exposes the page query for the plan test.
func PGListBeforeSQL(dialog bool) string { return pgListBeforeSQL(dialog) }

// PGListAfterSQL exposes ListMessagesAfter's page query for the plan test.
const PGListAfterSQL = pgListAfterSQL

// WithBoltDefaults makes Open use bbolt's default options (array freelist, synced on every commit)
// instead of boltOptions', for benchmarks that compare them.
func WithBoltDefaults(opt Options) Options {
	opt.boltDefaults = true
	return opt
}

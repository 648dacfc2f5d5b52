package store

import (
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Hooks for the conformance harness in package store_test (bolt_conformance_test.go), which
// cannot reach the bbolt internals itself.

// CheckBolt runs bbolt's page-level consistency check.
func CheckBolt(tb testing.TB, s Backend) { checkConsistency(tb, s.(*Store)) }

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

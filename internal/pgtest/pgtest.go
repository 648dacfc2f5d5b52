// Package pgtest gives tests a PostgreSQL database of their own. The server is named by
// CITEGATE_TEST_POSTGRES (a URL such as postgres:///citegate_test?host=/var/run/postgresql; .ci/run
// sets it). Without it a test is skipped with a one-line reason, except under CI=true, where a
// missing database fails the test: CI must test the PostgreSQL backend.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the test database URL.
const EnvVar = "CITEGATE_TEST_POSTGRES"

// BaseURL returns the test server's URL, or skips (fails under CI=true) when none is configured.
func BaseURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("CI=true but %s is not set: the PostgreSQL backend must be tested in CI (.ci/run sets it)", EnvVar)
		}
		tb.Skipf("PostgreSQL tests skipped: set %s=postgres://… to run them", EnvVar)
	}
	return u
}

// Schema creates an empty schema for one test, drops it when the test ends, and returns a URL whose
// search_path selects it, so every table the test creates lives there. The URL can be handed to
// child processes (citegate serve --store …).
func Schema(tb testing.TB) string {
	tb.Helper()
	base := BaseURL(tb)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("connect to %s: %v", EnvVar, err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "citegate_test_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
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
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("%s: %v", EnvVar, err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

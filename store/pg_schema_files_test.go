package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPGSchemaFilesNumberedOnce runs without a database: two branches that each add "the next"
// schema file land with the same number, and a PostgreSQL start then refuses the whole schema.
// The plain test run must catch that, not only the PostgreSQL suite.
func TestPGSchemaFilesNumberedOnce(t *testing.T) {
	ms, err := pgMigrations()
	require.NoError(t, err, "every file in pgschema/ is NNNN_name.sql, numbered 1, 2, 3, … without gaps or repeats")
	require.Equal(t, len(ms), PGSchemaVersion())
	for i, m := range ms {
		require.Equal(t, i+1, m.version, m.name)
	}
}

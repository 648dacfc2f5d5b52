package gateway

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations/markdown"
)

var updateCSS = flag.Bool("update", false, "rewrite generated files (web/static/highlight.css)")

// TestHighlightCSSUpToDate keeps web/static/highlight.css equal to what the markdown renderer's
// classes need. Regenerate with: go test ./gateway -run TestHighlightCSSUpToDate -update
func TestHighlightCSSUpToDate(t *testing.T) {
	want, err := markdown.HighlightCSS()
	require.NoError(t, err)
	path := filepath.Join("web", "static", "highlight.css")
	if *updateCSS {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "run: go test ./gateway -run TestHighlightCSSUpToDate -update")
}

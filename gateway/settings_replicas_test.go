package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSettingsUpdatedReachesEveryReplica: a language change made through one replica reaches the
// user's tabs connected to another (the bus carries settings.updated like the session frames),
// and nobody else's.
func TestSettingsUpdatedReachesEveryReplica(t *testing.T) {
	rs := newReplicas(t, 2, func() *scriptedModel {
		return &scriptedModel{answer: func(string, []string) string { return "好的[^1^]" }}
	})
	a, b := rs[0], rs[1]
	_, tok := a.env.user("alice")
	_, bobTok := a.env.user("bob")
	onA, onB, bobOnB := a.env.mustWS(tok), b.env.mustWS(tok), b.env.mustWS(bobTok)

	status, _, body := a.env.do(http.MethodPut, "/api/me/settings", tok, strings.NewReader(`{"language":"en"}`))
	require.Equal(t, http.StatusOK, status, body)
	want := map[string]any{"type": "settings.updated", "language": "en"}
	assert.Equal(t, want, onA.next())
	assert.Equal(t, want, onB.next(), "the tab on the other replica hears it")

	// Bob's first frame is his own change: alice's never reached him.
	status, _, body = b.env.do(http.MethodPut, "/api/me/settings", bobTok, strings.NewReader(`{"language":"zh"}`))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, map[string]any{"type": "settings.updated", "language": "zh"}, bobOnB.next())

	// The choice itself is in the shared store: the other replica renders alice's pages in it.
	status, _, body = b.env.do(http.MethodGet, "/api/me/settings", tok, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"effectiveLanguage":"en"`)
}

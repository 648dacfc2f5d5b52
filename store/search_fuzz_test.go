package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzMayMatch checks the search pre-filter against the matcher it stands in for: whenever a
// message's content matches a query, the filter must let its stored record through.
func FuzzMayMatch(f *testing.F) {
	for _, seed := range [][2]string{
		{"年假按工龄计算", "工龄"},
		{"Invoice TITLE wrong", "title invoice"},
		{"KELVIN \u212a and \u0130stanbul", "k i"},
		{"quote \" and back\\slash", `"`},
		{"line\u2028sep", "\u2028"},
		{"ÀÉÎ accented", "àé"},
		{"tab\there", "b\th"},
		{"\xff broken", "\ufffd"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, content, query string) {
		terms := SearchTerms(query)
		if len(terms) == 0 || !MatchTerms(content, terms) {
			return
		}
		raw, err := encodeJSON(Message{ID: 1, SessionID: "s", Role: RoleUser, Content: content})
		require.NoError(t, err)
		require.True(t, mayMatch(raw, terms), "content %q matches %q but its record %q was filtered out", content, query, raw)
	})
}

package storetest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chatFixture is one chat with every kind of record that hangs off a session.
type chatFixture struct {
	sess   store.Session
	msgIDs []uint64
	runID  string
	tokens []string
}

func newChatFixture(t *testing.T, s store.Backend, userID, question, answer string) chatFixture {
	t.Helper()
	ctx := context.Background()
	f := chatFixture{sess: newSession(t, s, userID)}
	require.NoError(t, s.SetSessionTitle(ctx, f.sess.ID, question))
	f.sess.Title = question
	u, err := s.AppendMessage(ctx, store.Message{SessionID: f.sess.ID, Role: store.RoleUser, Content: question})
	require.NoError(t, err)
	run, err := s.CreateRun(ctx, store.Run{SessionID: f.sess.ID, Channel: "desktop", UserMessageID: u.ID})
	require.NoError(t, err)
	f.runID = run.ID
	msgs := []store.Message{
		{SessionID: f.sess.ID, RunID: run.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"query":"q"}`}}},
		{SessionID: f.sess.ID, RunID: run.ID, Role: store.RoleTool, ToolCallID: "c1", ToolName: "web_search", Content: `{"results":[{"title":"tool only needle","url":"https://example.com/tool"}]}`},
	}
	f.msgIDs = append(f.msgIDs, u.ID)
	for _, m := range msgs {
		got, err := s.AppendMessage(ctx, m)
		require.NoError(t, err)
		f.msgIDs = append(f.msgIDs, got.ID)
	}
	_, final, err := s.ConcludeRun(ctx, store.Conclusion{RunID: run.ID, Phase: store.PhaseCompleted,
		Final: &store.Message{SessionID: f.sess.ID, RunID: run.ID, Role: store.RoleAssistant, Content: answer}})
	require.NoError(t, err)
	f.msgIDs = append(f.msgIDs, final.ID)
	for wm := range 2 {
		tok, _, err := s.CreateShare(ctx, f.sess.ID, userID, final.ID-uint64(wm))
		require.NoError(t, err)
		f.tokens = append(f.tokens, tok)
	}
	return f
}

func testDeleteChat(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	a := newChatFixture(t, s, "alice", "年假怎么算", "按工龄计算[^1^]")
	keep := newChatFixture(t, s, "alice", "other chat", "kept")
	bob := newChatFixture(t, s, "bob", "bob's chat", "bob's answer")
	require.NoError(t, s.BindConversation(ctx, "feishu:oc_1", a.sess.ID))
	require.NoError(t, s.BindConversation(ctx, "feishu:oc_2", keep.sess.ID))

	// Someone else's chat and a missing one are the same not-found, and nothing changes.
	_, err := s.DeleteChat(ctx, a.sess.ID, "bob")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.DeleteChat(ctx, "no-such-chat", "alice")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetSession(ctx, a.sess.ID)
	require.NoError(t, err)

	revoked, err := s.DeleteChat(ctx, a.sess.ID, "alice")
	require.NoError(t, err)
	assert.Equal(t, 2, revoked)

	_, err = s.GetSession(ctx, a.sess.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ListMessages(ctx, a.sess.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, id := range a.msgIDs {
		_, err := s.GetMessage(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound, "message %d", id)
	}
	rm, err := s.ListRunMessages(ctx, a.runID)
	require.NoError(t, err)
	assert.Empty(t, rm)
	_, err = s.GetRun(ctx, a.runID)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, tok := range a.tokens {
		_, err := s.GetShare(ctx, tok)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	_, err = s.ConversationSession(ctx, "feishu:oc_1")
	require.ErrorIs(t, err, store.ErrNotFound)
	list, err := s.ListSessions(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, keep.sess.ID, list[0].ID)
	shares, err := s.ListShares(ctx, "alice")
	require.NoError(t, err)
	assert.Len(t, shares, 2, "only the other chat's links remain")
	for _, e := range shares {
		assert.Equal(t, keep.sess.ID, e.SessionID)
	}

	// The other chats are untouched.
	for _, f := range []chatFixture{keep, bob} {
		msgs, err := s.ListMessages(ctx, f.sess.ID)
		require.NoError(t, err)
		assert.Len(t, msgs, len(f.msgIDs))
		for _, tok := range f.tokens {
			_, err := s.GetShare(ctx, tok)
			require.NoError(t, err)
		}
	}
	got, err := s.ConversationSession(ctx, "feishu:oc_2")
	require.NoError(t, err)
	assert.Equal(t, keep.sess.ID, got)

	// No key of the deleted chat is left in any bucket.
	dump := h.dump(t, s)
	assert.False(t, bytes.Contains(dump, []byte(a.sess.ID)), "a record still names the deleted chat")
	assert.False(t, bytes.Contains(dump, []byte(a.runID)), "a record still names the deleted chat's run")
	h.check(t, s)

	// Deleting again is not found; a new message to the deleted chat is refused.
	_, err = s.DeleteChat(ctx, a.sess.ID, "alice")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.AppendMessage(ctx, store.Message{SessionID: a.sess.ID, Role: store.RoleUser, Content: "x"})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testSearchSessions(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	older := newChatFixture(t, s, "alice", "年假怎么算", "年假按工龄计算，满一年五天。")
	clock.Advance(time.Minute)
	newer := newChatFixture(t, s, "alice", "Invoice title wrong", "Ask the issuer for a red-letter INVOICE.")
	clock.Advance(time.Minute)
	_ = newChatFixture(t, s, "bob", "年假 bob", "bob 的年假")

	// Content, case-insensitive, newest session first; tool results are never searched.
	res, err := s.SearchSessions(ctx, "alice", "invoice", store.SearchOptions{})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	assert.Equal(t, newer.sess.ID, res.Hits[0].Session.ID)
	assert.True(t, res.Hits[0].TitleMatch)
	require.Len(t, res.Hits[0].Messages, 2, "the question and the answer, not the tool result")
	assert.Equal(t, store.RoleAssistant, res.Hits[0].Messages[0].Role, "newest first")
	assert.False(t, res.Truncated)

	res, err = s.SearchSessions(ctx, "alice", "needle", store.SearchOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Hits, "text only in a tool result does not match")

	// A Chinese query is a substring; only the caller's sessions are searched.
	res, err = s.SearchSessions(ctx, "alice", "工龄", store.SearchOptions{})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	assert.Equal(t, older.sess.ID, res.Hits[0].Session.ID)
	assert.False(t, res.Hits[0].TitleMatch)
	require.Len(t, res.Hits[0].Messages, 1)

	// Every term must match within one message or the title.
	res, err = s.SearchSessions(ctx, "alice", "red-letter issuer", store.SearchOptions{})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	res, err = s.SearchSessions(ctx, "alice", "red-letter 工龄", store.SearchOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Hits)

	// Title-only match: a session's title is searched even when no message matches.
	require.NoError(t, s.SetSessionTitle(ctx, older.sess.ID, "holiday rules"))
	res, err = s.SearchSessions(ctx, "alice", "HOLIDAY", store.SearchOptions{})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	assert.True(t, res.Hits[0].TitleMatch)
	assert.Empty(t, res.Hits[0].Messages)

	// Bounds: the limit and the scan budget both cut the scan short, and say so.
	for range 3 {
		clock.Advance(time.Minute)
		newChatFixture(t, s, "alice", "limit probe", "limit probe answer")
	}
	res, err = s.SearchSessions(ctx, "alice", "probe", store.SearchOptions{Limit: 2})
	require.NoError(t, err)
	assert.Len(t, res.Hits, 2)
	assert.True(t, res.Truncated)
	res, err = s.SearchSessions(ctx, "alice", "probe", store.SearchOptions{MaxScan: 4})
	require.NoError(t, err)
	assert.True(t, res.Truncated)
	assert.Len(t, res.Hits, 1, "four index entries are one chat's messages")

	for _, q := range []string{"", "   ", strings.Repeat("x", store.MaxSearchQueryBytes+1), "\xff"} {
		_, err := s.SearchSessions(ctx, "alice", q, store.SearchOptions{})
		require.ErrorIs(t, err, store.ErrInvalid, "query %q", q)
	}
}

// testSearchEscapesAndCase covers text whose stored form or case folding differs from what was
// typed (a backend may pre-filter stored records without decoding them): JSON-escaped characters,
// runes that lower-case into ASCII letters, and non-ASCII letters with case.
func testSearchEscapesAndCase(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	sess := newSession(t, s, "alice")
	contents := []string{
		"温度 300 \u212a 以上",     // the Kelvin sign lower-cases to k
		"\u0130STANBUL 办事处",    // İ lower-cases to i
		`引号 "quoted" 与反斜杠 a\b`, // escaped in JSON
		"分隔\u2028符",            // escaped in JSON
		"ÀÉÎ 重音",               // letters with case outside ASCII
		"制表\t符",                // a control character
	}
	ids := make([]uint64, len(contents))
	for i, c := range contents {
		m, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: c})
		require.NoError(t, err)
		ids[i] = m.ID
	}
	for _, tc := range []struct {
		query string
		want  uint64
	}{
		{"300 k", ids[0]},
		{"istanbul", ids[1]},
		{`"quoted"`, ids[2]},
		{`a\b`, ids[2]},
		{"隔\u2028符", ids[3]},
		{"àéî", ids[4]},
		{"表\t符", ids[5]},
	} {
		res, err := s.SearchSessions(ctx, "alice", tc.query, store.SearchOptions{})
		require.NoError(t, err, tc.query)
		require.Len(t, res.Hits, 1, "query %q", tc.query)
		require.Len(t, res.Hits[0].Messages, 1, "query %q", tc.query)
		assert.Equal(t, tc.want, res.Hits[0].Messages[0].ID, "query %q", tc.query)
	}
}

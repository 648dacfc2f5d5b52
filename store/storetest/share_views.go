package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testShareCoverageAndAdvance: a share records how many messages its page shows (questions and
// answers, no tool traffic) and when the watermark message was written; AdvanceShare moves the
// same link forward, never back, only within its session, only for its owner, and keeps views.
func testShareCoverageAndAdvance(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	clock := newClock()
	s := h.openAt(t, path, clock)
	sess := newSession(t, s, "alice")
	other := newSession(t, s, "alice")
	add := func(sessionID string, m store.Message) store.Message {
		t.Helper()
		clock.Advance(time.Minute)
		m.SessionID = sessionID
		out, err := s.AppendMessage(ctx, m)
		require.NoError(t, err)
		return out
	}
	add(sess.ID, store.Message{Role: store.RoleUser, Content: "q1"})
	add(sess.ID, store.Message{Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "c1", Name: "web_search", Arguments: "{}"}}})
	add(sess.ID, store.Message{Role: store.RoleTool, ToolCallID: "c1", ToolName: "web_search", Content: "result"})
	a1 := add(sess.ID, store.Message{Role: store.RoleAssistant, Content: "a1"})
	foreign := add(other.ID, store.Message{Role: store.RoleUser, Content: "elsewhere"})

	tok, sh, err := s.CreateShare(ctx, sess.ID, "alice", a1.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, sh.Messages, "one question and one answer; the tool call and its result are not shown")
	assert.True(t, a1.CreatedAt.Equal(sh.WatermarkAt), "watermark time %v, want %v", sh.WatermarkAt, a1.CreatedAt)
	assert.Zero(t, sh.Views)
	assert.True(t, sh.LastViewedAt.IsZero())
	got, err := s.GetShare(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, sh, got)

	// The same chat grows; the link still covers what it covered.
	add(sess.ID, store.Message{Role: store.RoleUser, Content: "q2"})
	a2 := add(sess.ID, store.Message{Role: store.RoleAssistant, Content: "a2"})
	require.NoError(t, s.AddShareViews(ctx, []store.ShareViews{{ID: sh.TokenHash, Count: 3, Last: clock.Now()}}))

	// Only forward, only in its own session, only by its owner.
	_, err = s.AdvanceShare(ctx, sh.TokenHash, "alice", a1.ID-1)
	assert.ErrorIs(t, err, store.ErrInvalid, "never back")
	_, err = s.AdvanceShare(ctx, sh.TokenHash, "alice", foreign.ID)
	assert.ErrorIs(t, err, store.ErrInvalid, "a message of another session")
	_, err = s.AdvanceShare(ctx, sh.TokenHash, "alice", a2.ID+1000)
	assert.ErrorIs(t, err, store.ErrInvalid, "no such message")
	_, err = s.AdvanceShare(ctx, sh.TokenHash, "mallory", a2.ID)
	assert.ErrorIs(t, err, store.ErrNotFound, "a stranger's update looks like a missing share")
	_, err = s.AdvanceShare(ctx, hashToken("unknown"), "alice", a2.ID)
	assert.ErrorIs(t, err, store.ErrNotFound)
	got, err = s.GetShare(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, a1.ID, got.Watermark, "refused updates change nothing")

	up, err := s.AdvanceShare(ctx, sh.TokenHash, "alice", a2.ID)
	require.NoError(t, err)
	assert.Equal(t, a2.ID, up.Watermark)
	assert.Equal(t, 4, up.Messages)
	assert.True(t, a2.CreatedAt.Equal(up.WatermarkAt))
	assert.Equal(t, uint64(3), up.Views, "views are kept")
	assert.True(t, sh.CreatedAt.Equal(up.CreatedAt), "an update is the same link: its creation time stays")
	got, err = s.GetShare(ctx, tok)
	require.NoError(t, err, "the same token still opens it")
	assert.Equal(t, up, got)
	// The same watermark again is allowed (nothing newer to include) and changes nothing.
	again, err := s.AdvanceShare(ctx, sh.TokenHash, "alice", a2.ID)
	require.NoError(t, err)
	assert.Equal(t, up, again)

	// Sharing the chat as it is now hands back the updated link instead of minting another.
	tok2, sh2, created, err := s.ShareSession(ctx, sess.ID, "alice", a2.ID)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, tok, tok2)
	assert.Equal(t, up, sh2)

	list, err := s.ListShares(ctx, "alice")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, up, list[0].Share)

	require.NoError(t, s.Close())
	s = h.openAt(t, path, clock)
	got, err = s.GetShare(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, up, got, "coverage and views survive a restart")

	require.NoError(t, s.RevokeShare(ctx, tok, "alice"))
	_, err = s.AdvanceShare(ctx, sh.TokenHash, "alice", a2.ID)
	assert.ErrorIs(t, err, store.ErrNotFound, "a revoked link cannot be updated back to life")
	h.check(t, s)
}

// testShareViewsConcurrent: views added from many goroutines at once (as several gateway
// replicas flush their batches) all count; the last-viewed time only moves forward; a batch
// naming a revoked share neither fails nor brings it back.
func testShareViewsConcurrent(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)
	sess := newSession(t, s, "alice")
	_, err := s.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleUser, Content: "q"})
	require.NoError(t, err)
	wm, err := s.LastMessageID(ctx, sess.ID)
	require.NoError(t, err)
	_, a, err := s.CreateShare(ctx, sess.ID, "alice", wm)
	require.NoError(t, err)
	_, b, err := s.CreateShare(ctx, sess.ID, "alice", wm)
	require.NoError(t, err)
	goneTok, gone, err := s.CreateShare(ctx, sess.ID, "alice", wm)
	require.NoError(t, err)
	require.NoError(t, s.RevokeShare(ctx, goneTok, "alice"))

	base := clock.Now()
	const workers, rounds = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				at := base.Add(time.Duration(w*rounds+r) * time.Second)
				// Each batch names a twice (merged into one increment of 2), b once and the
				// revoked share once.
				errs <- s.AddShareViews(ctx, []store.ShareViews{
					{ID: a.TokenHash, Count: 1, Last: at},
					{ID: b.TokenHash, Count: 1, Last: at},
					{ID: gone.TokenHash, Count: 1, Last: at},
					{ID: a.TokenHash, Count: 1, Last: at.Add(-time.Hour)},
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	newest := base.Add(time.Duration(workers*rounds-1) * time.Second)
	gotA, err := s.GetShareByID(ctx, a.TokenHash)
	require.NoError(t, err)
	assert.Equal(t, uint64(2*workers*rounds), gotA.Views, "no increment lost")
	assert.True(t, newest.Equal(gotA.LastViewedAt), "last viewed %v, want %v", gotA.LastViewedAt, newest)
	gotB, err := s.GetShareByID(ctx, b.TokenHash)
	require.NoError(t, err)
	assert.Equal(t, uint64(workers*rounds), gotB.Views)
	_, err = s.GetShareByID(ctx, gone.TokenHash)
	assert.ErrorIs(t, err, store.ErrNotFound, "views of a revoked share do not bring it back")

	// An older batch arriving late adds its count but leaves the last-viewed time alone; empty
	// batches and zero counts are no-ops.
	require.NoError(t, s.AddShareViews(ctx, []store.ShareViews{{ID: b.TokenHash, Count: 5, Last: base.Add(-time.Hour)}}))
	require.NoError(t, s.AddShareViews(ctx, nil))
	require.NoError(t, s.AddShareViews(ctx, []store.ShareViews{{ID: b.TokenHash, Count: 0, Last: newest.Add(time.Hour)}}))
	gotB, err = s.GetShareByID(ctx, b.TokenHash)
	require.NoError(t, err)
	assert.Equal(t, uint64(workers*rounds+5), gotB.Views)
	assert.True(t, newest.Equal(gotB.LastViewedAt))

	// Lists carry the figures: the owner's and an operator's.
	list, err := s.ListShares(ctx, "alice")
	require.NoError(t, err)
	views := map[string]uint64{}
	for _, e := range list {
		views[e.ID()] = e.Views
	}
	assert.Equal(t, map[string]uint64{a.TokenHash: 2 * workers * rounds, b.TokenHash: workers*rounds + 5}, views)
	all, err := s.ListAllShares(ctx)
	require.NoError(t, err)
	for _, e := range all {
		assert.Equal(t, views[e.TokenHash], e.Views, "operator list of %s", e.TokenHash)
	}
	h.check(t, s)
}

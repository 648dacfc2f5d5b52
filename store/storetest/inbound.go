package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/citegate/citegate/store"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testAcceptInboundQueuesTheTurnInOneStep(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clock := h.openTest(t)

	first, err := s.AcceptInbound(ctx, inboundMsg("om_1", "年假怎么算？"))
	require.NoError(t, err)
	assert.False(t, first.Duplicate)
	assert.True(t, first.SessionCreated, "the first message creates the conversation's session")
	require.NotEmpty(t, first.SessionID)
	bound, err := s.ConversationSession(ctx, "feishu:oc_1")
	require.NoError(t, err)
	assert.Equal(t, first.SessionID, bound, "the session is bound to the conversation")
	sess, err := s.GetSession(ctx, first.SessionID)
	require.NoError(t, err)
	assert.Equal(t, "Alice", sess.Title)
	assert.Equal(t, "feishu", sess.Channel)

	// The turn is stored: a USER message of the run, and the run RUNNING and pointing at it.
	assert.Equal(t, store.PhaseRunning, first.Run.Phase)
	assert.Equal(t, first.UserMessage.ID, first.Run.UserMessageID)
	run, err := s.GetRun(ctx, first.Run.ID)
	require.NoError(t, err)
	assert.Equal(t, first.Run, run)
	msgs, err := s.ListMessages(ctx, first.SessionID)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, store.RoleUser, msgs[0].Role)
	assert.Equal(t, "年假怎么算？", msgs[0].Content)
	assert.Equal(t, first.Run.ID, msgs[0].RunID)
	assert.Equal(t, first.UserMessage, msgs[0])

	// The next message of the conversation joins the same session with a run of its own.
	clock.Advance(time.Second)
	second, err := s.AcceptInbound(ctx, inboundMsg("om_2", "那病假呢？"))
	require.NoError(t, err)
	assert.False(t, second.SessionCreated)
	assert.Equal(t, first.SessionID, second.SessionID)
	assert.NotEqual(t, first.Run.ID, second.Run.ID)
	assert.Greater(t, second.UserMessage.ID, first.UserMessage.ID)

	// A redelivery writes nothing.
	dup, err := s.AcceptInbound(ctx, inboundMsg("om_1", "年假怎么算？"))
	require.NoError(t, err)
	assert.Equal(t, store.Accepted{Duplicate: true}, dup)
	msgs, err = s.ListMessages(ctx, first.SessionID)
	require.NoError(t, err)
	assert.Len(t, msgs, 2, "a duplicate queues nothing")
	runs, err := s.ListRuns(ctx, first.SessionID)
	require.NoError(t, err)
	assert.Len(t, runs, 2)

	// After the dedup window the same id is a new message again.
	clock.Advance(48 * time.Hour)
	again, err := s.AcceptInbound(ctx, inboundMsg("om_1", "年假怎么算？"))
	require.NoError(t, err)
	assert.False(t, again.Duplicate)
	assert.Equal(t, first.SessionID, again.SessionID)
}

func testAcceptInboundCommands(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)

	// A command of a conversation without a session resolves nothing and creates nothing, but the
	// message id is recorded.
	stop := inboundMsg("om_1", "")
	stop.Create = nil
	got, err := s.AcceptInbound(ctx, stop)
	require.NoError(t, err)
	assert.Equal(t, store.Accepted{}, got)
	_, err = s.ConversationSession(ctx, "feishu:oc_1")
	assert.ErrorIs(t, err, store.ErrNotFound)
	got, err = s.AcceptInbound(ctx, stop)
	require.NoError(t, err)
	assert.True(t, got.Duplicate)

	q, err := s.AcceptInbound(ctx, inboundMsg("om_2", "问题"))
	require.NoError(t, err)

	// /stop, /share: the bound session, nothing created.
	stop.SeenKey = "msg:feishu:om_3"
	got, err = s.AcceptInbound(ctx, stop)
	require.NoError(t, err)
	assert.Equal(t, store.Accepted{SessionID: q.SessionID}, got)

	// /new: a fresh session, bound in place of the old one, which is kept.
	fresh := inboundMsg("om_4", "")
	fresh.Fresh = true
	got, err = s.AcceptInbound(ctx, fresh)
	require.NoError(t, err)
	assert.True(t, got.SessionCreated)
	assert.NotEqual(t, q.SessionID, got.SessionID)
	bound, err := s.ConversationSession(ctx, "feishu:oc_1")
	require.NoError(t, err)
	assert.Equal(t, got.SessionID, bound)
	_, err = s.GetSession(ctx, q.SessionID)
	assert.NoError(t, err, "the earlier session stays")
	sessions, err := s.ListSessions(ctx, "feishu:oc_1")
	require.NoError(t, err)
	assert.Len(t, sessions, 2)
}

// TestAcceptInboundAllOrNothing: when any part fails, nothing is stored — in particular the dedup
// key, so that the platform's redelivery is processed instead of being dropped as a duplicate of
// a message that was never queued.
func testAcceptInboundAllOrNothing(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)

	// A turn in a conversation that has no session and may not create one.
	in := inboundMsg("om_1", "问题")
	in.Create = nil
	_, err := s.AcceptInbound(ctx, in)
	require.ErrorIs(t, err, store.ErrNotFound)
	fresh, err := s.MarkSeen(ctx, in.SeenKey, time.Hour)
	require.NoError(t, err)
	assert.True(t, fresh, "the failed message's id was not recorded")

	// A run id that exists already fails after the session was created in the same transaction:
	// the session, its binding, the message and the key are all rolled back.
	q, err := s.AcceptInbound(ctx, inboundMsg("om_2", "问题"))
	require.NoError(t, err)
	clash := inboundMsg("om_3", "另一个问题")
	clash.Conversation = "feishu:oc_2"
	clash.Create = &store.Session{UserID: "feishu:oc_2", Channel: "feishu"}
	clash.Turn.RunID = q.Run.ID
	_, err = s.AcceptInbound(ctx, clash)
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.ConversationSession(ctx, "feishu:oc_2")
	assert.ErrorIs(t, err, store.ErrNotFound, "the binding was rolled back")
	sessions, err := s.ListSessions(ctx, "feishu:oc_2")
	require.NoError(t, err)
	assert.Empty(t, sessions, "the session was rolled back")
	fresh, err = s.MarkSeen(ctx, clash.SeenKey, time.Hour)
	require.NoError(t, err)
	assert.True(t, fresh, "the key was rolled back")
	last, err := s.LastMessageID(ctx, q.SessionID)
	require.NoError(t, err)
	assert.Equal(t, q.UserMessage.ID, last)
}

func testAcceptInboundRejectsMalformedInput(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	cases := map[string]func(*store.Inbound){
		"no key":            func(in *store.Inbound) { in.SeenKey = "" },
		"no ttl":            func(in *store.Inbound) { in.SeenTTL = 0 },
		"no conversation":   func(in *store.Inbound) { in.Conversation = "" },
		"fresh, no session": func(in *store.Inbound) { in.Create = nil; in.Fresh = true },
		"blank text":        func(in *store.Inbound) { in.Turn.Text = " \n" },
		"NUL in run id":     func(in *store.Inbound) { in.Turn.RunID = "a\x00b" },
		"NUL in session id": func(in *store.Inbound) { in.Create.ID = "a\x00b" },
	}
	for name, mutate := range cases {
		in := inboundMsg("om_1", "问题")
		mutate(&in)
		_, err := s.AcceptInbound(ctx, in)
		assert.ErrorIs(t, err, store.ErrInvalid, name)
	}
	_, err := s.ConversationSession(ctx, "feishu:oc_1")
	assert.ErrorIs(t, err, store.ErrNotFound, "nothing was written")
}

// TestAcceptInboundConcurrentFirstMessages: webhook channels deliver concurrently, and the first
// messages of a conversation must share one session rather than each create their own.
func testAcceptInboundConcurrentFirstMessages(t *testing.T, h Harness) {
	ctx := context.Background()
	s, _ := h.openTest(t)
	const n = 24
	res := make([]store.Accepted, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res[i], errs[i] = s.AcceptInbound(ctx, inboundMsg(fmt.Sprintf("om_%d", i), fmt.Sprintf("问题 %d", i)))
		})
	}
	wg.Wait()
	created := 0
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, res[0].SessionID, res[i].SessionID)
		if res[i].SessionCreated {
			created++
		}
	}
	assert.Equal(t, 1, created, "exactly one message created the session")
	sessions, err := s.ListSessions(ctx, "feishu:oc_1")
	require.NoError(t, err)
	assert.Len(t, sessions, 1)
	runs, err := s.ListRuns(ctx, res[0].SessionID)
	require.NoError(t, err)
	assert.Len(t, runs, n)
	msgs, err := s.ListMessages(ctx, res[0].SessionID)
	require.NoError(t, err)
	assert.Len(t, msgs, n)
}

// TestAcceptedTurnSurvivesACrash: a queued turn the agent never ran is not lost after a crash: the
// message stays in the session, its run is recovered as FAILED, and a redelivery is a duplicate.
func testAcceptedTurnSurvivesACrash(t *testing.T, h Harness) {
	ctx := context.Background()
	path := h.NewDB(t)
	clock := newClock()
	s := h.openAt(t, path, clock)
	q, err := s.AcceptInbound(ctx, inboundMsg("om_1", "问题"))
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = h.openAt(t, path, clock)
	assert.Equal(t, 1, s.RecoveredRuns())
	run, err := s.GetRun(ctx, q.Run.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseFailed, run.Phase)
	msg, err := s.GetMessage(ctx, q.UserMessage.ID)
	require.NoError(t, err)
	assert.Equal(t, "问题", msg.Content)
	dup, err := s.AcceptInbound(ctx, inboundMsg("om_1", "问题"))
	require.NoError(t, err)
	assert.True(t, dup.Duplicate)
}

func inboundMsg(id, text string) store.Inbound {
	in := store.Inbound{
		SeenKey:      "msg:feishu:" + id,
		SeenTTL:      48 * time.Hour,
		Conversation: "feishu:oc_1",
		Create:       &store.Session{UserID: "feishu:oc_1", Channel: "feishu", Title: "Alice"},
	}
	if text != "" {
		in.Turn = &store.InboundTurn{Channel: "feishu", Text: text}
	}
	return in
}

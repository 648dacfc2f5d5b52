// Package storetest is the conformance suite every store.Backend passes: the behaviour callers rely
// on (ids, ordering, ErrNotFound, conversation binding, shares, credentials spent once, dedup,
// run conclusion and recovery, …) checked the same way against bbolt and PostgreSQL. A backend's
// test calls Run with a Harness that creates fresh databases; backend internals (file format,
// corrupt bytes, migrations) are tested beside each backend instead.
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/citegate/citegate/store"
	"github.com/stretchr/testify/require"
)

// Opener opens one database with opt (a clock and a logger); a test may close the store and open
// the database again (restart and crash-recovery tests).
type Opener func(opt store.Options) (store.Backend, error)

// Harness adapts a backend to the suite.
type Harness struct {
	// NewDB creates a fresh, empty database for one test (a temporary file, a new schema, …) and
	// returns how to open it. Anything it creates is removed by tb.Cleanup.
	NewDB func(tb testing.TB) Opener
	// Check, when set, runs the backend's own consistency check on a store a test wrote to.
	Check func(tb testing.TB, s store.Backend)
	// Stored reports whether the backend holds a record of kind under key, reading its storage
	// directly. Kinds: "running" (run id on the running list), "login_code", "web_session",
	// "user_token" and "share" (each keyed by the hex sha256 of its secret). Credentials must be
	// stored only as hashes, which only a look at the storage can tell.
	Stored func(tb testing.TB, s store.Backend, kind, key string) bool
	// Dump returns everything the backend stored, as bytes a secret can be searched for in.
	Dump func(tb testing.TB, s store.Backend) []byte
}

// tests lists every conformance test by name.
var tests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"ConcludeRunWritesAnswerPhaseAndMetadataTogether", testConcludeRunWritesAnswerPhaseAndMetadataTogether},
	{"ConcludeRunWithoutFinalAndRecovery", testConcludeRunWithoutFinalAndRecovery},
	{"ConcludeRunRejectsBadInput", testConcludeRunRejectsBadInput},
	{"ListMessagesBeforePages", testListMessagesBeforePages},
	{"ListMessagesAfterPages", testListMessagesAfterPages},
	{"AcceptInboundQueuesTheTurnInOneStep", testAcceptInboundQueuesTheTurnInOneStep},
	{"AcceptInboundCommands", testAcceptInboundCommands},
	{"AcceptInboundAllOrNothing", testAcceptInboundAllOrNothing},
	{"AcceptInboundRejectsMalformedInput", testAcceptInboundRejectsMalformedInput},
	{"AcceptInboundConcurrentFirstMessages", testAcceptInboundConcurrentFirstMessages},
	{"AcceptedTurnSurvivesACrash", testAcceptedTurnSurvivesACrash},
	{"LoginCodeOneTime", testLoginCodeOneTime},
	{"LoginCodeConcurrentRedeemOnce", testLoginCodeConcurrentRedeemOnce},
	{"LoginCodeAndSessionExpiry", testLoginCodeAndSessionExpiry},
	{"RotateRevokeAndList", testRotateRevokeAndList},
	{"ConcurrentAppendsAcrossSessions", testConcurrentAppendsAcrossSessions},
	{"AppendMessage", testAppendMessage},
	{"MessagesNotFound", testMessagesNotFound},
	{"MessageIndexPrefixIsolation", testMessageIndexPrefixIsolation},
	{"MergeMetadata", testMergeMetadata},
	{"MergeMetadataConcurrentLosesNoKey", testMergeMetadataConcurrentLosesNoKey},
	{"OperatorRoleGrantRevokeAudited", testOperatorRoleGrantRevokeAudited},
	{"AuditListingAndPaging", testAuditListingAndPaging},
	{"ListAllSharesAndOperatorRevoke", testListAllSharesAndOperatorRevoke},
	{"CreateRun", testCreateRun},
	{"CreateRunKeepsLeaseAndOrigin", testCreateRunKeepsLeaseAndOrigin},
	{"ActiveRun", testActiveRun},
	{"RenewAndReapRunLeases", testRenewAndReapRunLeases},
	{"RunAheadInStoreOrder", testRunAheadInStoreOrder},
	{"FinishRunRules", testFinishRunRules},
	{"SetRunMarkers", testSetRunMarkers},
	{"ListRunsOldestFirst", testListRunsOldestFirst},
	{"MarkSeen", testMarkSeen},
	{"PruneSeen", testPruneSeen},
	{"MarkSeenConcurrentExactlyOnce", testMarkSeenConcurrentExactlyOnce},
	{"UnmarkSeen", testUnmarkSeen},
	{"CreateSession", testCreateSession},
	{"ListSessionsNewestActivityFirst", testListSessionsNewestActivityFirst},
	{"ConversationBinding", testConversationBinding},
	{"Shares", testShares},
	{"ShareListAndReuse", testShareListAndReuse},
	{"ShareCoverageAndAdvance", testShareCoverageAndAdvance}, {"ShareViewsConcurrent", testShareViewsConcurrent},
	{"CreateUserAndTokenLookup", testCreateUserAndTokenLookup},
	{"CreateUserNameRules", testCreateUserNameRules},
	{"UsersSurviveReopen", testUsersSurviveReopen},
	{"UserLanguage", testUserLanguage},
	{"DeleteChat", testDeleteChat},
	{"SearchSessions", testSearchSessions},
	{"SearchEscapesAndCase", testSearchEscapesAndCase},
	{"ReopenKeepsEverything", testReopenKeepsEverything},
	{"CrashLeftoverRunsBecomeFailed", testCrashLeftoverRunsBecomeFailed},
	{"CancelledContextStartsNoTransaction", testCancelledContextStartsNoTransaction},
	{"StartTurnStoresQuestionAndRunTogether", testStartTurnStoresQuestionAndRunTogether},
	{"StartTurnAllOrNothing", testStartTurnAllOrNothing},
	{"StartedTurnSurvivesACrash", testStartedTurnSurvivesACrash},
	{"AppendMessagesInOneStep", testAppendMessagesInOneStep},
	{"ConcurrentTurnsKeepSessionOrder", testConcurrentTurnsKeepSessionOrder},
	{"DialogLinesMatchTheDialog", testDialogLinesMatchTheDialog},
	{"GetToolResult", testGetToolResult},
}

// Run runs the whole suite against one backend, each test on a fresh database.
func Run(t *testing.T, h Harness) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// fakeClock is an injectable clock the tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openAt opens db with the given clock (nil: the wall clock), closing it when the test ends unless
// the test closed it first.
func (h Harness) openAt(tb testing.TB, db Opener, clock *fakeClock) store.Backend {
	tb.Helper()
	opt := store.Options{Logger: quietLogger()}
	if clock != nil {
		opt.Now = clock.Now
	}
	s, err := db(opt)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// openTest opens a fresh store with a fake clock.
func (h Harness) openTest(tb testing.TB) (store.Backend, *fakeClock) {
	tb.Helper()
	clock := newClock()
	return h.openAt(tb, h.NewDB(tb), clock), clock
}

// check runs the backend's consistency check, if it has one.
func (h Harness) check(tb testing.TB, s store.Backend) {
	tb.Helper()
	if h.Check != nil {
		h.Check(tb, s)
	}
}

func (h Harness) stored(tb testing.TB, s store.Backend, kind, key string) bool {
	tb.Helper()
	require.NotNil(tb, h.Stored, "the harness must implement Stored")
	return h.Stored(tb, s, kind, key)
}

func (h Harness) dump(tb testing.TB, s store.Backend) []byte {
	tb.Helper()
	require.NotNil(tb, h.Dump, "the harness must implement Dump")
	return h.Dump(tb, s)
}

// hashToken is the hex sha256 of a secret, the form the store keeps it in.
func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// objectKeys returns the member names of a JSON object in document order, duplicates included.
func objectKeys(tb testing.TB, raw []byte) []string {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	require.NoError(tb, err)
	require.Equal(tb, json.Delim('{'), tok)
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		require.NoError(tb, err)
		keys = append(keys, k.(string))
		var v json.RawMessage
		require.NoError(tb, dec.Decode(&v))
	}
	return keys
}

func newSession(tb testing.TB, s store.Backend, userID string) store.Session {
	tb.Helper()
	sess, err := s.CreateSession(context.Background(), store.Session{UserID: userID, Channel: "desktop"})
	require.NoError(tb, err)
	return sess
}

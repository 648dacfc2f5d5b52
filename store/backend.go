package store

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"
)

// Backend is everything citegate's callers do with persistence, whichever database holds it. Two
// implementations satisfy it with the same record semantics: *Store (bbolt, the embedded default
// for one process) and *PG (PostgreSQL, shared by any number of `serve` processes). The
// conformance suite in store/storetest runs against both; a method added here must be added to
// both backends and covered there.
//
// Operations that only make sense for one backend stay off this interface: Backup and Path belong
// to the bbolt file (PostgreSQL is backed up with pg_dump), and callers reach them through a type
// assertion (see FileBackup).
type Backend interface {
	// Sessions and conversation bindings.
	CreateSession(ctx context.Context, sess Session) (Session, error)
	GetSession(ctx context.Context, id string) (Session, error)
	ListSessions(ctx context.Context, userID string) ([]Session, error)
	SetSessionTitle(ctx context.Context, id, title string) error
	BindConversation(ctx context.Context, key, sessionID string) error
	ConversationSession(ctx context.Context, key string) (string, error)
	// DeleteChat deletes one of userID's sessions with its messages, runs, share links and
	// conversation bindings, in one transaction; not userID's is ErrNotFound.
	DeleteChat(ctx context.Context, sessionID, userID string) (revokedShares int, err error)
	// SearchSessions finds userID's sessions by title and conversation text (MatchTerms), newest
	// first, bounded by opt.Limit and opt.MaxScan.
	SearchSessions(ctx context.Context, userID, query string, opt SearchOptions) (SearchResult, error)

	// Messages.
	AppendMessage(ctx context.Context, m Message) (Message, error)
	GetMessage(ctx context.Context, id uint64) (Message, error)
	ListMessages(ctx context.Context, sessionID string) ([]Message, error)
	ListMessagesBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]Message, error)
	ListMessagesAfter(ctx context.Context, sessionID string, afterID uint64, limit int) ([]Message, error)
	ListDialogBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]Message, error)
	// ListDialogLinesBefore is ListDialogBefore reduced to what a model's history window reads
	// (dialog.go), without decoding metadata.
	ListDialogLinesBefore(ctx context.Context, sessionID string, beforeID uint64, limit int) ([]DialogLine, error)
	// AppendMessages appends several messages of one session in one transaction (turn.go).
	AppendMessages(ctx context.Context, ms []Message) ([]Message, error)
	ListRunMessages(ctx context.Context, runID string) ([]Message, error)
	// GetToolResult is the run's TOOL message answering one tool call (tool_result.go): what a
	// citation's excerpt is read from without reading the rest of the run.
	GetToolResult(ctx context.Context, runID, callID string) (Message, error)
	LastMessageID(ctx context.Context, sessionID string) (uint64, error)
	MergeMetadata(ctx context.Context, id uint64, patch map[string]json.RawMessage) error

	// Runs.
	CreateRun(ctx context.Context, r Run) (Run, error)
	// StartTurn stores a turn's USER message and its RUNNING run in one transaction (turn.go).
	StartTurn(ctx context.Context, m Message, r Run) (Message, Run, error)
	FinishRun(ctx context.Context, id string, phase Phase, errMsg string, finalMessageID uint64) (Run, error)
	ConcludeRun(ctx context.Context, c Conclusion) (Run, Message, error)
	SetRunMarkers(ctx context.Context, id string, seen, kept, dropped int) error
	GetRun(ctx context.Context, id string) (Run, error)
	ListRuns(ctx context.Context, sessionID string) ([]Run, error)
	// RecoveredRuns reports how many RUNNING runs opening the store turned into FAILED "interrupted".
	RecoveredRuns() int

	// Runs across replicas (leases.go): the session's running run wherever it executes, renewing
	// one owner's leases, and failing the runs whose lease passed.
	ActiveRun(ctx context.Context, sessionID string) (Run, error)
	RenewRunLeases(ctx context.Context, owner string, until time.Time) (int, error)
	ReapExpiredRuns(ctx context.Context, now time.Time) ([]Run, error)
	// RunAhead is the earlier RUNNING run of the session, on another replica, that a turn waits
	// for before it starts (order.go); ErrNotFound when the turn may start.
	RunAhead(ctx context.Context, runID, owner string) (Run, error)

	// Chat-platform dedup keys.
	MarkSeen(ctx context.Context, key string, ttl time.Duration) (bool, error)
	PruneSeen(ctx context.Context) (int, error)
	UnmarkSeen(ctx context.Context, key string) error
	// AcceptInbound: dedup, conversation session (created and bound when missing) and the user's
	// queued turn of one chat message, in one transaction.
	AcceptInbound(ctx context.Context, in Inbound) (Accepted, error)

	// Shares.
	CreateShare(ctx context.Context, sessionID, ownerID string, watermark uint64) (string, Share, error)
	ShareSession(ctx context.Context, sessionID, ownerID string, watermark uint64) (token string, sh Share, created bool, err error)
	GetShare(ctx context.Context, token string) (Share, error)
	ListShares(ctx context.Context, ownerID string) ([]ShareEntry, error)
	RevokeShare(ctx context.Context, token, ownerID string) error
	RevokeShareID(ctx context.Context, id, ownerID string) error
	// AdvanceShare and AddShareViews: a share's coverage and view counts (share_views.go).
	AdvanceShare(ctx context.Context, id, ownerID string, watermark uint64) (Share, error)
	AddShareViews(ctx context.Context, views []ShareViews) error

	// Users, access tokens, login codes and browser sessions.
	CreateUser(ctx context.Context, name string) (User, string, error)
	UserByToken(ctx context.Context, token string) (User, error)
	GetUser(ctx context.Context, id string) (User, error)
	CountUsers(ctx context.Context) (int, error)
	UserByName(ctx context.Context, name string) (User, error)
	ListUsers(ctx context.Context) ([]UserInfo, error)
	RotateToken(ctx context.Context, name string) (User, string, error)
	RevokeUser(ctx context.Context, name string) (User, error)
	CreateLoginCode(ctx context.Context, userID string, ttl time.Duration) (string, time.Time, error)
	RedeemLoginCode(ctx context.Context, code string, sessionTTL time.Duration) (User, string, error)
	UserBySession(ctx context.Context, token string) (User, error)
	DeleteSession(ctx context.Context, token string) error
	CreateWebSession(ctx context.Context, userID string, ttl time.Duration) (string, error)
	// SetLanguage records the user's interface language (settings.go).
	SetLanguage(ctx context.Context, userID, lang string) (User, error)

	// Operators and the audit log (operators.go, audit.go): the role, the shares an operator may
	// reach, and the append-only record of what operators and role changes did.
	CreateUserRole(ctx context.Context, name string, operator bool, by Actor) (User, string, error)
	SetOperator(ctx context.Context, name string, operator bool, by Actor) (User, bool, error)
	ListAllShares(ctx context.Context) ([]OperatorShare, error)
	GetShareByID(ctx context.Context, id string) (Share, error)
	RevokeShareAsOperator(ctx context.Context, id string, audit AuditEntry) (Share, error)
	AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error)
	ListAudit(ctx context.Context, before uint64, limit int) ([]AuditEntry, error)
	AuditSince(ctx context.Context, after uint64, limit int) ([]AuditEntry, error)

	// Lifecycle.
	Ping(ctx context.Context) error
	Close() error
}

// FileBackup is implemented by backends that are one file a consistent copy can be streamed from
// (bbolt). A PostgreSQL database is backed up with pg_dump instead.
type FileBackup interface {
	BackupWith(ctx context.Context, open func(size int64) (io.Writer, error)) (int64, error)
	BackupFile(ctx context.Context, path string) (int64, error)
	Path() string
}

// ErrNoFileBackup is returned where a file backup is asked of a backend that has none.
var ErrNoFileBackup = errors.New("this store is a PostgreSQL database: back it up with pg_dump, not citegate backup")

var (
	_ Backend    = (*Store)(nil)
	_ FileBackup = (*Store)(nil)
)

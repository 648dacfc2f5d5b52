package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

// The gateway declares what it asks of its dependencies here (DESIGN §3: interfaces are defined
// where they are used). Any store.Backend (bbolt or PostgreSQL) satisfies Store and *agent.Agent
// satisfies Agent; tests may wrap either to observe or fail one call. The dispatcher and the
// websocket layer narrow these further (DispatchStore, DispatchAgent, wsStore, wsAgent).

// Store is the persistence the gateway calls. A method the gateway starts to call is added here,
// in its group.
type Store interface {
	DispatchStore // the dispatcher's share (dispatcher.go)
	wsStore       // the websocket layer's share (ws_hub.go)
	// Sessions (chats).
	CreateSession(ctx context.Context, sess store.Session) (store.Session, error)
	GetSession(ctx context.Context, id string) (store.Session, error)
	ListSessions(ctx context.Context, userID string) ([]store.Session, error)
	SetSessionTitle(ctx context.Context, id, title string) error
	DeleteChat(ctx context.Context, sessionID, userID string) (revokedShares int, err error)
	SearchSessions(ctx context.Context, userID, query string, opt store.SearchOptions) (store.SearchResult, error)
	// Messages and runs.
	GetMessage(ctx context.Context, id uint64) (store.Message, error)
	ListMessages(ctx context.Context, sessionID string) ([]store.Message, error)
	ListMessagesAfter(ctx context.Context, sessionID string, afterID uint64, limit int) ([]store.Message, error)
	ListRunMessages(ctx context.Context, runID string) ([]store.Message, error)
	GetToolResult(ctx context.Context, runID, callID string) (store.Message, error)
	LastMessageID(ctx context.Context, sessionID string) (uint64, error)
	MergeMetadata(ctx context.Context, id uint64, patch map[string]json.RawMessage) error
	GetRun(ctx context.Context, id string) (store.Run, error)
	ListRuns(ctx context.Context, sessionID string) ([]store.Run, error)
	ConcludeRun(ctx context.Context, c store.Conclusion) (store.Run, store.Message, error)
	// Runs across replicas (bus_cluster.go, bus_lease.go).
	ActiveRunStore
	LeaseStore
	// Chat-platform inbound (the dispatcher).
	AcceptInbound(ctx context.Context, in store.Inbound) (store.Accepted, error)
	UnmarkSeen(ctx context.Context, key string) error
	// Shares.
	ShareSession(ctx context.Context, sessionID, ownerID string, watermark uint64) (token string, sh store.Share, created bool, err error)
	GetShare(ctx context.Context, token string) (store.Share, error)
	GetShareByID(ctx context.Context, id string) (store.Share, error)
	ListShares(ctx context.Context, ownerID string) ([]store.ShareEntry, error)
	ListAllShares(ctx context.Context) ([]store.OperatorShare, error)
	RevokeShare(ctx context.Context, token, ownerID string) error
	RevokeShareID(ctx context.Context, id, ownerID string) error
	RevokeShareAsOperator(ctx context.Context, id string, audit store.AuditEntry) (store.Share, error)
	AdvanceShare(ctx context.Context, id, ownerID string, watermark uint64) (store.Share, error)
	viewStore // share page views, batched (share_views.go)
	// Users, tokens, login codes and browser sessions.
	CountUsers(ctx context.Context) (int, error)
	CreateUser(ctx context.Context, name string) (store.User, string, error)
	CreateUserRole(ctx context.Context, name string, operator bool, by store.Actor) (store.User, string, error)
	GetUser(ctx context.Context, id string) (store.User, error)
	UserByName(ctx context.Context, name string) (store.User, error)
	UserByToken(ctx context.Context, token string) (store.User, error)
	UserBySession(ctx context.Context, token string) (store.User, error)
	ListUsers(ctx context.Context) ([]store.UserInfo, error)
	RotateToken(ctx context.Context, name string) (store.User, string, error)
	RevokeUser(ctx context.Context, name string) (store.User, error)
	SetOperator(ctx context.Context, name string, operator bool, by store.Actor) (store.User, bool, error)
	CreateLoginCode(ctx context.Context, userID string, ttl time.Duration) (string, time.Time, error)
	RedeemLoginCode(ctx context.Context, code string, sessionTTL time.Duration) (store.User, string, error)
	CreateWebSession(ctx context.Context, userID string, ttl time.Duration) (string, error)
	DeleteSession(ctx context.Context, token string) error
	SetLanguage(ctx context.Context, userID, lang string) (store.User, error)
	// Audit log.
	AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error)
	AuditSince(ctx context.Context, after uint64, limit int) ([]store.AuditEntry, error)
	ListAudit(ctx context.Context, before uint64, limit int) ([]store.AuditEntry, error)
	// Health.
	Ping(ctx context.Context) error
}

// Agent is what the gateway asks of the agent: run turns, cancel a session's run, follow every
// run's events (the websocket hub and the metrics) and name the model.
type Agent interface {
	Submit(ctx context.Context, t agent.Turn) (*agent.RunHandle, error)
	Cancel(sessionID string) bool
	Subscribe(fn agent.Sink) (unsubscribe func())
	ModelName() string
}

var (
	_ Store = store.Backend(nil)
	_ Agent = (*agent.Agent)(nil)
)

// Package store persists citegate's records (sessions, messages, runs, users, shares, dedup keys) in
// a bbolt file. It owns the record types; it knows nothing of channels, HTTP or the agent loop.
package store

import (
	"encoding/json"
	"errors"
	"time"
)

// Role is the author of a message.
type Role string

// Message roles.
const (
	RoleUser      Role = "USER"
	RoleAssistant Role = "ASSISTANT"
	RoleTool      Role = "TOOL"
)

// Phase is the state of a run.
type Phase string

// Run phases. RUNNING is the only non-terminal one.
const (
	PhaseRunning   Phase = "RUNNING"
	PhaseCompleted Phase = "COMPLETED"
	PhaseFailed    Phase = "FAILED"
	PhaseCancelled Phase = "CANCELLED"
)

// Terminal reports whether p is a final phase.
func (p Phase) Terminal() bool { return p == PhaseCompleted || p == PhaseFailed || p == PhaseCancelled }

// Errors callers match with errors.Is.
var (
	// ErrNotFound: no such record (or, for shares, a revoked one).
	ErrNotFound = errors.New("not found")
	// ErrLocked: another process holds the database file.
	ErrLocked = errors.New("database is locked by another process")
	// ErrBadMetadata: a message's stored metadata is not a JSON object, so it cannot be merged.
	ErrBadMetadata = errors.New("message metadata is not a JSON object")
	// ErrInvalid: an argument is malformed (empty name, bad id, metadata that is not an object, …).
	ErrInvalid = errors.New("invalid argument")
	// ErrConflict: the request conflicts with stored state (name taken, id exists, run already finished).
	ErrConflict = errors.New("conflict")
)

// ToolCall is one tool invocation requested by the model in an ASSISTANT message.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Message is one persisted chat message. IDs are global and strictly increasing, so "after the last
// USER message" is a plain id comparison.
type Message struct {
	ID         uint64     `json:"id"`
	SessionID  string     `json:"sessionId"`
	RunID      string     `json:"runId,omitempty"`
	Role       Role       `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"toolCalls,omitempty"`
	ToolCallID string     `json:"toolCallId,omitempty"`
	ToolName   string     `json:"toolName,omitempty"`
	// Metadata is a JSON object or empty. Citations live under the "citations" key.
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	CreatedAt time.Time       `json:"createdAt"`
}

// Session is one conversation: a desktop chat or a chat-platform conversation.
type Session struct {
	ID        string    `json:"id"`
	UserID    string    `json:"userId"`
	Channel   string    `json:"channel"` // "desktop", "feishu", "dingtalk", "wechat", "cli"
	Title     string    `json:"title"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Run is one agent run answering one USER message.
type Run struct {
	ID             string    `json:"id"`
	SessionID      string    `json:"sessionId"`
	Channel        string    `json:"channel"`
	Phase          Phase     `json:"phase"`
	StartedAt      time.Time `json:"startedAt"`
	EndedAt        time.Time `json:"endedAt,omitzero"`
	Error          string    `json:"error,omitempty"`
	UserMessageID  uint64    `json:"userMessageId,omitempty"`
	FinalMessageID uint64    `json:"finalMessageId,omitempty"`
	MarkersSeen    int       `json:"markersSeen"`
	MarkersKept    int       `json:"markersKept"`
	MarkersDropped int       `json:"markersDropped"`
	// LeaseOwner and LeaseUntil name the process executing a RUNNING run and until when it vouches
	// for it, when several replicas share the database (the PostgreSQL store sets them from its
	// options when CreateRun is given none; with bbolt, one process, they stay empty and Open
	// recovers instead). The owner renews the leases of its runs, queued ones included, in one
	// write (RenewRunLeases); a RUNNING run whose lease has passed belongs to a replica that died,
	// and ReapExpiredRuns fails it.
	LeaseOwner string    `json:"leaseOwner,omitempty"`
	LeaseUntil time.Time `json:"leaseUntil,omitzero"`
	// Origin is where the run's turn came from, a JSON value opaque to the store: for a chat
	// channel, what another replica needs to tell the conversation that the run was interrupted.
	Origin json.RawMessage `json:"origin,omitempty"`
}

// Conclusion is everything the end of a run writes; ConcludeRun commits it in one transaction so
// that no crash can separate a final answer from its run's phase or from its citations.
type Conclusion struct {
	RunID string
	Phase Phase // terminal
	Error string
	// Final, when set, is appended as the run's last ASSISTANT message (the answer of a COMPLETED
	// run, or the partial text of one that did not complete) with its metadata as given, citations
	// included. Its ID and CreatedAt are assigned as by AppendMessage; SessionID and RunID must be
	// the run's.
	Final *Message
	// Citation marker counts of the final answer (seen, kept after verification, dropped).
	MarkersSeen, MarkersKept, MarkersDropped int
}

// User is a desktop/API user. Its access token is stored only as a hash.
type User struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	// Operator users review what others shared (the operator console, see operators.go).
	Operator bool `json:"operator,omitempty"`
	// Language is the interface language the user chose (LangZH or LangEN); empty follows the
	// browser's Accept-Language. See settings.go.
	Language string `json:"language,omitempty"`
}

// Share is a read-only link to a session frozen at Watermark (the last message id at creation).
// The token itself is never stored; TokenHash identifies it.
type Share struct {
	TokenHash string    `json:"tokenHash"`
	SessionID string    `json:"sessionId"`
	OwnerID   string    `json:"ownerId"`
	Watermark uint64    `json:"watermark"`
	CreatedAt time.Time `json:"createdAt"`
	// Coverage and views (share_views.go).
	ShareStats
}

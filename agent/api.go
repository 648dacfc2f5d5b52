// Package agent runs citegate's agent loop: a Model streams text and tool calls, Tools run, every
// message is persisted, the run's sources are numbered as their results arrive, and the run ends with
// one store transaction holding the final answer, its verified citations and the terminal phase.
// Completion hooks run after that commit, and run Events reach subscribers (desktop hub, chat
// channels, metrics).
package agent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/citegate/citegate/agent/llm"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// EventType names a run event. The values are the desktop websocket frame types.
type EventType string

// Run events, emitted per run in this order: RunStarted, then any of ToolStarted / ToolFinished /
// AnswerDelta, then AnswerFinal (not for FAILED runs without text), Citations (only when at least one
// citation was verified), RunFinished.
const (
	EventRunStarted   EventType = "run.started"
	EventToolStarted  EventType = "tool.started"
	EventToolFinished EventType = "tool.finished"
	EventAnswerDelta  EventType = "answer.delta"
	EventAnswerFinal  EventType = "answer.final"
	EventCitations    EventType = "citations"
	EventRunFinished  EventType = "run.finished"
)

// Event is one run event. Fields that do not concern a type are zero.
type Event struct {
	Type      EventType `json:"type"`
	SessionID string    `json:"sessionId"`
	RunID     string    `json:"runId"`
	Channel   string    `json:"-"`
	At        time.Time `json:"-"`

	// run.started
	UserMessageID uint64 `json:"userMessageId,omitempty"`
	Model         string `json:"model,omitempty"`

	// run.started / tool.finished: the URLs of this turn's text and of the run's tool results so
	// far (at tool.finished, those of the round just stored), an immutable snapshot that any
	// goroutine may read. It is the allow set of a chat channel's reply pump (gateway/reply.go); the
	// run's own rule adds the history window's user messages and the registry's URLs. Not encoded.
	Links *citations.LinkSnapshot `json:"-"`

	// tool.started / tool.finished
	CallID    string `json:"callId,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	OK        bool   `json:"ok,omitempty"`

	// answer.delta: Text is already marker-free (citations.Stripper output) and shows no URL the run
	// did not see (citations.LinkFilter output).
	Text string `json:"text,omitempty"`

	// answer.final / citations: the final ASSISTANT message; Content keeps the raw markers.
	MessageID uint64               `json:"messageId,omitempty"`
	Content   string               `json:"content,omitempty"`
	Citations []citations.Citation `json:"citations,omitempty"`
	// Metadata is the final message's metadata as committed (citations, link decision), so that a
	// subscriber renders the answer by the record's rule without reading the record back.
	Metadata json.RawMessage `json:"-"`

	// run.finished; the marker counts are those of the citation check (zero when it did not run).
	Phase          store.Phase `json:"phase,omitempty"`
	Error          string      `json:"error,omitempty"`
	MarkersSeen    int         `json:"-"`
	MarkersKept    int         `json:"-"`
	MarkersDropped int         `json:"-"`
	// LinksHidden counts the URLs of the final answer the link rule hid (DESIGN §4).
	LinksHidden int `json:"-"`
}

// Sink receives the events of one run. It is called from the run's goroutine in event order and
// must not block for long; a panicking sink is recovered and logged.
type Sink func(Event)

// Turn is one user message submitted to a session.
type Turn struct {
	SessionID string
	Text      string
	Channel   string // "desktop", "feishu", …; recorded on the run, used for metrics
	Sink      Sink   // optional per-run events, in addition to Agent.Subscribe subscribers
	// RunID and UserMessageID, when set, name a turn the caller has already stored: its USER
	// message (Text is that message's content) and a RUNNING run pointing at it, written in one
	// transaction with the message's dedup key (store.AcceptInbound). The agent then runs that run
	// instead of writing a message and a run of its own, so a turn accepted from a chat platform
	// is never lost between being marked seen and being queued.
	RunID         string
	UserMessageID uint64
	// Metadata, when set, is stored as the metadata of the turn's USER message; it must be a JSON
	// object. The desktop records there what a turn is ({"regenerateOf": id} for a new answer to
	// an earlier question, {"editOf": id} for an edited question) so that every later view of the
	// history can show it the same way.
	Metadata json.RawMessage
}

// Stored reports whether the turn's USER message and run were stored by the caller.
func (t Turn) Stored() bool { return t.UserMessageID != 0 }

// The model contract lives in agent/llm so that model implementations need not import the loop;
// these aliases keep the loop's own names.
type (
	// ChatMessage is one message handed to a Model.
	ChatMessage = llm.Message
	// ToolSpec describes a tool to a Model.
	ToolSpec = llm.ToolSpec
	// ModelRequest is one model round.
	ModelRequest = llm.Request
	// ModelResponse is the complete result of one round: text and/or tool calls.
	ModelResponse = llm.Response
	// Model produces one round of an answer (agent/openaimodel, agent/extractive).
	Model = llm.Model
)

// Tool is one tool the model may call. Call returns the content handed to the model: the success
// shape or the failure shape of DESIGN §4 ({"error":…} / {"error":…,"url":…}). A non-nil error is
// turned into {"error": err.Error()} by the loop.
type Tool interface {
	Spec() ToolSpec
	Call(ctx context.Context, arguments string) (string, error)
}

// RunResult is what completion hooks see: the run as committed (terminal phase, marker counts), and
// the run's final ASSISTANT message as stored, citations included (nil when there is none).
type RunResult struct {
	Run   store.Run
	Final *store.Message
}

// Hook runs after a run's record is committed; it cannot change that record, the run's outcome or its
// events. Errors and panics are logged and isolated.
type Hook interface {
	Name() string
	AfterRun(ctx context.Context, r RunResult) error
}

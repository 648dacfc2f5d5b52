// Package llm holds the contract between the agent loop and a model: the messages of one round,
// the tools offered, the answer and the Model interface. It is a leaf (standard library and the
// store's record types only), so a model implementation (agent/openaimodel, agent/extractive) and
// the loop depend on it without depending on each other.
package llm

import (
	"context"
	"encoding/json"

	"github.com/citegate/citegate/store"
)

// Message is one message handed to a Model.
type Message struct {
	Role       string           `json:"role"` // "system", "user", "assistant", "tool"
	Content    string           `json:"content"`
	ToolCalls  []store.ToolCall `json:"toolCalls,omitempty"`
	ToolCallID string           `json:"toolCallId,omitempty"`
	Name       string           `json:"name,omitempty"` // tool name, for role "tool"
}

// ToolSpec describes a tool to a Model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema object
}

// Request is one model round.
type Request struct {
	Messages []Message
	Tools    []ToolSpec
}

// Response is the complete result of one round: text and/or tool calls.
type Response struct {
	Text      string
	ToolCalls []store.ToolCall
}

// Model produces one round of an answer, calling onDelta with raw text deltas (markers included) as
// they arrive. Implementations: agent/openaimodel (OpenAI-compatible chat completions) and
// agent/extractive (offline, no LLM).
type Model interface {
	// Name is shown to users, e.g. "gpt-4o-mini" or "extractive (no LLM)".
	Name() string
	Generate(ctx context.Context, req Request, onDelta func(string)) (Response, error)
}

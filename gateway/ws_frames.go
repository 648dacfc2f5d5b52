package gateway

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

const (
	// maxFrameBytes admits a chat.send at the text limit however its JSON is encoded: an escaped
	// character (\uXXXX) is 6 bytes for at most 1 byte of text; 4 KiB is for the other fields.
	maxFrameBytes = 6*maxTextBytes + 4<<10
	// maxTextBytes mirrors the agent's limit so the user gets the error before a session is created.
	maxTextBytes = 32 << 10
	titleRunes   = 40
)

// wsFrame is every server → client frame (DESIGN §5). Fields that do not concern a type stay empty.
type wsFrame struct {
	Type          string               `json:"type"`
	SessionID     string               `json:"sessionId,omitempty"`
	RunID         string               `json:"runId,omitempty"`
	ClientMsgID   string               `json:"clientMsgId,omitempty"`
	UserMessageID uint64               `json:"userMessageId,omitempty"`
	Model         string               `json:"model,omitempty"`
	CallID        string               `json:"callId,omitempty"`
	Tool          string               `json:"tool,omitempty"`
	Arguments     string               `json:"arguments,omitempty"`
	OK            *bool                `json:"ok,omitempty"`
	Text          string               `json:"text,omitempty"`
	MessageID     uint64               `json:"messageId,omitempty"`
	Content       *string              `json:"content,omitempty"`
	HTML          *string              `json:"html,omitempty"`
	Citations     []citations.Citation `json:"citations,omitempty"`
	Phase         store.Phase          `json:"phase,omitempty"`
	Error         string               `json:"error,omitempty"`
	Code          string               `json:"code,omitempty"`
	Message       string               `json:"message,omitempty"`
	Session       *sessionJSON         `json:"session,omitempty"`
	Messages      *[]messageJSON       `json:"messages,omitempty"`
	// Before and HasMore page session.history (ws_page.go): the page is older than message Before
	// (absent: the newest page), and HasMore tells whether older messages remain.
	Before  uint64 `json:"before,omitempty"`
	HasMore *bool  `json:"hasMore,omitempty"`
	// RetryAfterMs, on a rate_limited error, is how long until a send is allowed again.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// clientFrame is every client → server frame.
type clientFrame struct {
	Type        string `json:"type"`
	SessionID   string `json:"sessionId"`
	Text        string `json:"text"`
	ClientMsgID string `json:"clientMsgId"`
	// MessageID names the message chat.regenerate and chat.edit act on.
	MessageID uint64 `json:"messageId"`
	// meta is the USER message's metadata for a turn chatSend submits on behalf of chat.regenerate
	// or chat.edit (never read from the wire).
	meta json.RawMessage
	// Before is session.more's cursor: the id of the oldest message the client shows.
	Before uint64 `json:"before"`
	// Newest is, on session.open, the id of the newest message the page already shows (the app
	// shell rendered it, see firstPage): the answer is session.unchanged when it still is.
	Newest uint64 `json:"newest"`
}

// quoteShort quotes at most 40 bytes of s for an error message, so a hostile frame type cannot
// make the answer large or carry invalid UTF-8.
func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40]
	}
	b, _ := json.Marshal(strings.ToValidUTF8(s, "?"))
	return string(b)
}

// titleOf is the first ~40 runes of the first line of text.
func titleOf(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	line = strings.Join(strings.Fields(line), " ")
	if r := []rune(line); len(r) > titleRunes {
		return string(r[:titleRunes]) + "…"
	}
	return line
}

func itoa(n int) string { return strconv.Itoa(n) }

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// Message actions: regenerate and edit-and-resend (websocket frames chat.regenerate and chat.edit),
// copy text and the Markdown export (answer text built from the stored record), feedback
// (feedback.go).
//
// Regenerate is a new run of the same question. Its USER message carries
// metadata {"regenerateOf": <id of the first asking>}; the old answer stays where it was, and the
// desktop shows every answer to one question as versions of one reply ("‹ 2/2 ›"), the newest
// first shown. Edit and resend is a new run of the edited text; its USER message carries
// {"editOf": <id of the edited message>}; it is appended to the conversation and every earlier
// message stays. Both go through chat.send's path (validation, ownership, rate limit, queue).

// actionMeta is what the message actions keep in a message's metadata.
type actionMeta struct {
	Feedback     *storedFeedback `json:"feedback"`
	RegenerateOf uint64          `json:"regenerateOf"`
	EditOf       uint64          `json:"editOf"`
}

// readActionMeta reads the action keys of metadata; malformed metadata has none. A metadata
// document without any of the keys is not decoded at all.
func readActionMeta(metadata []byte) actionMeta {
	var am actionMeta
	if len(metadata) == 0 || !(bytes.Contains(metadata, []byte(`"feedback"`)) ||
		bytes.Contains(metadata, []byte(`"regenerateOf"`)) || bytes.Contains(metadata, []byte(`"editOf"`))) {
		return am
	}
	if json.Unmarshal(metadata, &am) != nil {
		return actionMeta{}
	}
	return am
}

// addActionFields puts the action keys of m's metadata on its desktop form.
func addActionFields(mj *messageJSON, m store.Message) {
	am := readActionMeta(m.Metadata)
	switch m.Role {
	case store.RoleUser:
		mj.RegenerateOf, mj.EditOf = am.RegenerateOf, am.EditOf
	case store.RoleAssistant:
		if am.Feedback != nil && (am.Feedback.Vote == voteUp || am.Feedback.Vote == voteDown) {
			mj.Feedback = &feedbackJSON{Vote: am.Feedback.Vote, Comment: am.Feedback.Comment, At: am.Feedback.At}
		}
	}
}

// isAnswer reports whether m is an answer (final or interrupted), the only message that takes
// feedback, copy and regenerate.
func isAnswer(m store.Message) bool { return m.Role == store.RoleAssistant && len(m.ToolCalls) == 0 }

// actionTarget loads message f.MessageID of the client's session f.SessionID. Whatever is not the
// client's (another user's session, a message of another session, a missing one) is not found.
func (c *client) actionTarget(ctx context.Context, f clientFrame) (store.Message, bool) {
	if f.SessionID == "" || f.MessageID == 0 {
		c.sendError(CodeBadRequest, f.Type+" needs sessionId and messageId", f.SessionID, f.ClientMsgID)
		return store.Message{}, false
	}
	if !c.owns(ctx, f.SessionID) {
		c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
		return store.Message{}, false
	}
	m, err := c.s.hub.st.GetMessage(ctx, f.MessageID)
	if err != nil || m.SessionID != f.SessionID {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			c.s.storeErr("get_message", err)
			c.sendError(CodeInternal, c.say("could not read the message; try again in a moment", "无法读取这条消息，请稍后再试。"), f.SessionID, f.ClientMsgID)
			return store.Message{}, false
		}
		c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
		return store.Message{}, false
	}
	return m, true
}

// chatRegenerate starts a new run of the question that message f.MessageID asks (a USER message)
// or answers (an answer). Every version points at the first asking, so the versions of one reply
// form one group however often it is regenerated.
func (c *client) chatRegenerate(ctx context.Context, f clientFrame) {
	m, ok := c.actionTarget(ctx, f)
	if !ok {
		return
	}
	question := m
	switch {
	case m.Role == store.RoleUser:
	case isAnswer(m) && m.RunID != "":
		run, err := c.s.st.GetRun(ctx, m.RunID)
		if err == nil && run.UserMessageID != 0 {
			question, err = c.s.hub.st.GetMessage(ctx, run.UserMessageID)
		}
		if err != nil || run.UserMessageID == 0 || question.SessionID != m.SessionID || question.Role != store.RoleUser {
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				c.s.storeErr("get_run", err)
			}
			c.sendError(CodeBadRequest, c.say("the question of this answer is no longer stored", "找不到这条回答对应的问题。"), f.SessionID, f.ClientMsgID)
			return
		}
	default:
		c.sendError(CodeBadRequest, c.say("only a question or an answer can be regenerated", "只能重新生成问题或回答。"), f.SessionID, f.ClientMsgID)
		return
	}
	root := question.ID
	if am := readActionMeta(question.Metadata); am.RegenerateOf != 0 {
		root = am.RegenerateOf
	}
	f.Text = question.Content
	f.meta = json.RawMessage(`{"regenerateOf":` + strconv.FormatUint(root, 10) + `}`)
	c.chatSend(ctx, f)
}

// chatEdit starts a new run of f.Text as an edited version of USER message f.MessageID. The
// edited question is appended; the earlier messages stay as they were.
func (c *client) chatEdit(ctx context.Context, f clientFrame) {
	m, ok := c.actionTarget(ctx, f)
	if !ok {
		return
	}
	if m.Role != store.RoleUser {
		c.sendError(CodeBadRequest, c.say("only your own messages can be edited", "只能编辑自己发送的消息。"), f.SessionID, f.ClientMsgID)
		return
	}
	f.meta = json.RawMessage(`{"editOf":` + strconv.FormatUint(m.ID, 10) + `}`)
	c.chatSend(ctx, f)
}

// Answer text: an answer as a person reads it outside the page, from the stored record. The link
// rule applies as on the page (the record's allowed links and the citations' URLs, nothing else),
// markers outside code become display numbers 1..k in n order (invalid ones vanish), markers inside
// code stay as typed, and the numbered sources follow.

// numberStyle writes display number k of a citation marker.
type numberStyle func(k int) string

// bracketNumber is "[k]", the form a chat message or a terminal shows (as `citegate ask` does).
func bracketNumber(k int) string { return "[" + strconv.Itoa(k) + "]" }

// superNumber is k in Unicode superscript digits: readable as plain text and in any Markdown
// viewer, with no HTML.
func superNumber(k int) string {
	const digits = "⁰¹²³⁴⁵⁶⁷⁸⁹"
	ds := []rune(digits)
	var b strings.Builder
	for _, d := range strconv.Itoa(k) {
		b.WriteRune(ds[d-'0'])
	}
	return b.String()
}

// answerBody is content with the link rule applied and its markers numbered by style; sep goes
// between adjacent numbers (superscripts need a comma so that ¹ and ² never read as ¹²).
func answerBody(content string, cits []citations.Citation, allowed []string, style numberStyle, sep string) string {
	content, _, _ = citations.FilterLinks(content, citations.AllowList(allowed))
	display := citations.DisplayNumbers(cits)
	var b strings.Builder
	b.Grow(len(content))
	last, prevNumEnd := 0, -1
	for _, m := range citations.MarkersOutsideCode(content) {
		b.WriteString(content[last:m.Start])
		if k, ok := display[m.N]; ok {
			if prevNumEnd == m.Start {
				b.WriteString(sep)
			}
			b.WriteString(style(k))
			prevNumEnd = m.End
		} else if prevNumEnd == m.Start {
			prevNumEnd = m.End // a dropped marker between two kept ones keeps them apart
		}
		last = m.End
	}
	b.WriteString(content[last:])
	return strings.TrimRight(b.String(), " \t\n")
}

// sourcesLabel is the heading of an answer's sources.
func sourcesLabel(lang string) string {
	if lang == "en" {
		return "Sources"
	}
	return "来源"
}

// copyText is an answer as "copy" puts it on the clipboard: the text with [k] numbers, then its
// sources, one per line.
func copyText(m store.Message, lang string) string {
	cits := citations.FromMetadata(m.Metadata)
	var b strings.Builder
	b.WriteString(answerBody(m.Content, cits, linkAllowList(m.Metadata, cits), bracketNumber, ""))
	if len(cits) > 0 {
		b.WriteString("\n\n")
		b.WriteString(sourcesLabel(lang))
		if lang == "en" {
			b.WriteString(":\n")
		} else {
			b.WriteString("：\n")
		}
		display := citations.DisplayNumbers(cits)
		for _, c := range cits {
			line := bracketNumber(display[c.N]) + " "
			if title := strings.TrimSpace(c.Title); title != "" {
				line += title + " — "
			}
			b.WriteString(line + c.URL + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// feedbackTime is the clock reading stored with a vote, without a monotonic part.
func (s *Server) feedbackTime() time.Time { return s.cfg.Now().Round(0).UTC() }

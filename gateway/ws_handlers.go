package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/store"
)

// submitWait bounds how long a chat.send waits for the agent to accept the turn.
const submitWait = 10 * time.Second

// handle processes one client frame. Whatever is wrong with it, the answer is an error frame and
// the connection stays up.
func (c *client) handle(ctx context.Context, data []byte) {
	var f clientFrame
	if err := json.Unmarshal(data, &f); err != nil {
		c.s.log.Debug("websocket frame is not a JSON object", "err", err)
		c.sendError(CodeBadRequest, "the frame is not a JSON object", "", "")
		return
	}
	switch f.Type {
	case "chat.send":
		c.chatSend(ctx, f)
	case "chat.cancel":
		if f.SessionID == "" {
			c.sendError(CodeBadRequest, "chat.cancel needs sessionId", "", f.ClientMsgID)
			return
		}
		if !c.owns(ctx, f.SessionID) {
			c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
			return
		}
		if !c.s.hub.ag.Cancel(f.SessionID) {
			c.sendError(CodeBadRequest, "no run is in progress in this session", f.SessionID, f.ClientMsgID)
		}
	case "chat.regenerate":
		c.chatRegenerate(ctx, f)
	case "chat.edit":
		c.chatEdit(ctx, f)
	case "session.open":
		if f.SessionID == "" {
			c.sendError(CodeBadRequest, "session.open needs sessionId", "", f.ClientMsgID)
			return
		}
		c.sessionPage(ctx, f, 0)
	case "session.more":
		c.sessionMore(ctx, f)
	case "":
		c.sendError(CodeBadRequest, "frame has no type", "", f.ClientMsgID)
	default:
		c.sendError(CodeBadRequest, "unknown frame type "+quoteShort(f.Type), "", f.ClientMsgID)
	}
}

// owns checks that the session exists and is the client's; store errors count as not owned. It
// runs in the client's read goroutine, so the store read blocks only this client.
func (c *client) owns(ctx context.Context, sessionID string) bool {
	if len(sessionID) > 128 {
		return false
	}
	h := c.s.hub
	if owner, ok := h.owners.get(sessionID); ok {
		return owner == c.user.ID
	}
	sess, err := h.st.GetSession(ctx, sessionID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			c.s.storeErr("get_session", err)
		}
		return false
	}
	h.owners.set(sess.ID, sess.UserID)
	return sess.UserID == c.user.ID
}

func (c *client) chatSend(ctx context.Context, f clientFrame) {
	text := strings.TrimSpace(f.Text)
	switch {
	case text == "":
		c.sendError(CodeBadRequest, "chat.send needs a non-empty text", f.SessionID, f.ClientMsgID)
		return
	case len(text) > maxTextBytes:
		c.sendError(CodeBadRequest, "the message is too long (at most 32 KiB)", f.SessionID, f.ClientMsgID)
		return
	case !utf8.ValidString(text):
		c.sendError(CodeBadRequest, "the message is not valid UTF-8", f.SessionID, f.ClientMsgID)
		return
	}
	if f.SessionID != "" && !c.owns(ctx, f.SessionID) {
		c.sendError(CodeNotFound, "not found", f.SessionID, f.ClientMsgID)
		return
	}
	if ok, wait := c.s.allowChat(c.user.ID); !ok {
		secs := itoa(retrySeconds(wait))
		msg := "too many messages: at most " + itoa(c.s.cfg.ChatRatePerMinute) + " per minute; send again in " + secs + " s"
		if c.lang != "en" {
			msg = "发送过于频繁：每分钟最多 " + itoa(c.s.cfg.ChatRatePerMinute) + " 条，请在 " + secs + " 秒后再试。"
		}
		c.send(&wsFrame{Type: "error", Code: CodeRateLimited, Message: msg, SessionID: f.SessionID, ClientMsgID: f.ClientMsgID, RetryAfterMs: wait.Milliseconds()})
		return
	}
	h := c.s.hub
	sessionID := f.SessionID
	if sessionID == "" {
		sess, err := h.st.CreateSession(ctx, store.Session{UserID: c.user.ID, Channel: "desktop", Title: titleOf(text)})
		if err != nil {
			c.s.storeErr("create_session", err)
			c.s.log.Error("create session", "user", c.user.ID, "err", err)
			c.sendError(CodeInternal, c.say("could not create the session; try again in a moment", "无法创建会话，请稍后再试。"), "", f.ClientMsgID)
			return
		}
		// The owner is known from here on, so the run's events route without a store read.
		h.owners.set(sess.ID, sess.UserID)
		sessionID = sess.ID
		sj := toSessionJSON(sess)
		// Every tab of the user (on any replica) learns about the new session; the sender matches
		// it by clientMsgId.
		c.s.toUserEverywhere(c.user.ID, &wsFrame{Type: "session.created", SessionID: sess.ID, ClientMsgID: f.ClientMsgID, Session: &sj})
	}
	subCtx, cancel := context.WithTimeout(ctx, submitWait)
	defer cancel()
	if _, err := h.ag.Submit(subCtx, agent.Turn{SessionID: sessionID, Text: text, Channel: "desktop", Metadata: f.meta}); err != nil {
		// The cause goes to the log; the user gets a sentence they can act on.
		c.s.log.Warn("submit turn", "session", sessionID, "err", err)
		code, msg := CodeInternal, c.say("could not start the answer; try again in a moment", "无法开始回答，请稍后再试。")
		switch {
		case errors.Is(err, agent.ErrQueueFull):
			code, msg = CodeRateLimited, c.say("too many messages are waiting in this conversation; wait for the answers and send again",
				"这个会话里等待回答的消息太多了，请等当前回答结束后再发送。")
		case errors.Is(err, agent.ErrBadTurn):
			code, msg = CodeBadRequest, c.say("this message cannot be answered (empty or too long)", "这条消息无法处理（为空或过长）。")
		case errors.Is(err, agent.ErrClosed), ctx.Err() != nil, subCtx.Err() != nil:
			code, msg = CodeUnavailable, c.say("the server is restarting; send the message again in a moment", "服务正在重启，请稍后重新发送。")
		}
		c.sendError(code, msg, sessionID, f.ClientMsgID)
	}
}

// say picks the client's language for a user-facing message.
func (c *client) say(en, zh string) string {
	if c.lang == "en" {
		return en
	}
	return zh
}

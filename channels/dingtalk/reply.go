package dingtalk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// AI card flowStatus values (DingTalk's AI card template convention).
const (
	flowProcessing = "1"
	flowInputing   = "2"
	flowFinished   = "3"
	flowFailed     = "5"
)

const (
	noteCardContinued = "\n\n*（内容较长，其余部分见下一条消息）*"
	noteCardBroken    = "⚠️ 卡片更新失败，完整回答见下一条消息。"
	noteContinuation  = "*（接上条卡片）*\n\n"
)

// reply is one answer: an AI card that streams (card mode) or markdown at the end.
type reply struct {
	c   *Channel
	ref *Ref
	d   *deliverer

	mu         sync.Mutex
	card       bool // card mode and the card is usable
	outTrackID string
	inputing   bool   // flowStatus already moved to "inputing"
	shown      string // text the card shows now
	capped     bool   // the streamed text reached the card's size limit; later updates are skipped
}

// Start creates and delivers the AI card (card mode). When that fails, the answer falls back to
// markdown at the end; the error is returned for the log.
func (r *reply) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.card {
		return nil
	}
	r.outTrackID = "citegate-" + uuid.NewString()
	if err := r.c.createCard(ctx, r.ref, r.outTrackID); err != nil {
		r.card = false
		r.c.logAPIError("card create", r.ref, err)
		return fmt.Errorf("dingtalk: card unavailable, answering in markdown: %w", err)
	}
	return nil
}

// Update streams the text so far into the card. Without a card it does nothing (the dispatcher does
// not call it: Limits reports no streaming).
func (r *reply) Update(ctx context.Context, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.cardLive() || r.capped {
		return nil
	}
	if n := prefixLimit(text, cardMaxRunes, cardMaxBytes); n < len(text) {
		// Show the longest prefix that fits once, then leave the card alone until Finish; the
		// remainder is delivered as markdown there.
		text, r.capped = text[:n], true
	}
	if text == r.shown || strings.TrimSpace(text) == "" {
		return nil
	}
	if !r.inputing {
		// Move the card from "processing" to "inputing" so the client renders the stream.
		if err := r.c.updateCard(ctx, r.outTrackID, map[string]string{"flowStatus": flowInputing}); err != nil {
			r.c.logAPIError("card status", r.ref, err)
		} else {
			r.inputing = true
		}
	}
	if err := r.c.streamCard(ctx, r.outTrackID, text, false, false); err != nil {
		r.c.logAPIError("card streaming", r.ref, err)
		return err
	}
	r.shown = text
	return nil
}

// Finish shows the final text: the card is finalized (and set to "finished"); a text too long for a
// card continues in markdown messages. Without a card (or when the card breaks) the whole text goes
// out as markdown.
func (r *reply) Finish(ctx context.Context, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.TrimSpace(text) == "" {
		text = "（没有生成回答）"
	}
	if !r.cardLive() {
		return r.d.markdown(ctx, text)
	}
	head, rest := text, ""
	if n := cardCut(text); n < len(text) {
		head, rest = text[:n], text[n:]
		head = strings.TrimRight(head, " \n") + noteCardContinued
	}
	if err := r.finalizeCard(ctx, head, flowFinished, false); err != nil {
		r.card = false
		r.c.logAPIError("card finalize", r.ref, err)
		r.markBroken(ctx)
		return r.d.markdown(ctx, text)
	}
	if rest != "" {
		return r.d.markdown(ctx, noteContinuation+strings.TrimLeft(rest, " \n"))
	}
	return nil
}

// Fail shows reason: in the card (marked failed, keeping what was streamed) or as a markdown message.
func (r *reply) Fail(ctx context.Context, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.cardLive() {
		return r.d.markdown(ctx, "⚠️ "+reason)
	}
	content := "⚠️ " + reason
	if s := strings.TrimSpace(r.shown); s != "" {
		content = s + "\n\n> " + content
	}
	if n := cardCut(content); n < len(content) {
		content = "⚠️ " + reason
	}
	if err := r.finalizeCard(ctx, content, flowFailed, true); err != nil {
		r.card = false
		r.c.logAPIError("card fail", r.ref, err)
		return r.d.markdown(ctx, "⚠️ "+reason)
	}
	return nil
}

// cardLive reports whether the answer goes to a card: card mode, created by Start, not broken.
func (r *reply) cardLive() bool { return r.card && r.outTrackID != "" }

// finalizeCard sends the last streaming frame and sets the card's flowStatus (and content, for
// clients that render the parameter rather than the stream).
func (r *reply) finalizeCard(ctx context.Context, content, status string, isError bool) error {
	if err := r.c.streamCard(ctx, r.outTrackID, content, true, isError); err != nil {
		return err
	}
	r.shown = content
	err := r.c.updateCard(ctx, r.outTrackID, map[string]string{"flowStatus": status, r.c.cfg.CardContentKey: content})
	if err != nil {
		// The text is final on the card already; a stale status badge is not worth a duplicate answer.
		r.c.logAPIError("card status", r.ref, err)
	}
	return nil
}

// markBroken tells the user, in the card if it still accepts anything, that the answer follows as a
// message.
func (r *reply) markBroken(ctx context.Context) {
	content := noteCardBroken
	if s := strings.TrimSpace(r.shown); s != "" && cardCut(s+"\n\n> "+content) == len(s+"\n\n> "+content) {
		content = s + "\n\n> " + content
	}
	err := r.c.updateCard(ctx, r.outTrackID, map[string]string{"flowStatus": flowFailed, r.c.cfg.CardContentKey: content})
	if err != nil {
		r.c.logAPIError("card mark failed", r.ref, err)
	}
}

// cardCut returns where a text must be cut to fit one card (len(text) when it fits), preferring a
// paragraph or line break and leaving room for the continuation note.
func cardCut(text string) int {
	if prefixLimit(text, cardMaxRunes, cardMaxBytes) == len(text) {
		return len(text)
	}
	return cutPoint(text, cardMaxRunes-len([]rune(noteCardContinued)), cardMaxBytes-len(noteCardContinued))
}

// createCard creates the AI card and delivers it to the conversation.
func (c *Channel) createCard(ctx context.Context, ref *Ref, outTrackID string) error {
	body := map[string]any{
		"cardTemplateId": c.cfg.CardTemplateID,
		"outTrackId":     outTrackID,
		"cardData": map[string]any{"cardParamMap": map[string]string{
			"flowStatus":         flowProcessing,
			c.cfg.CardContentKey: "",
		}},
		"callbackType":          "STREAM",
		"imGroupOpenSpaceModel": map[string]any{"supportForward": true},
		"imRobotOpenSpaceModel": map[string]any{"supportForward": true},
		"userIdType":            1,
	}
	if ref.Group {
		if ref.ConversationID == "" {
			return errors.New("dingtalk: card: group message without conversation id")
		}
		body["openSpaceId"] = "dtv1.card//IM_GROUP." + ref.ConversationID
		body["imGroupOpenDeliverModel"] = map[string]any{"robotCode": c.cfg.RobotCode}
	} else {
		if ref.StaffID == "" {
			return errors.New("dingtalk: card: sender has no staff id")
		}
		body["openSpaceId"] = "dtv1.card//IM_ROBOT." + ref.StaffID
		body["imRobotOpenDeliverModel"] = map[string]any{"spaceType": "IM_ROBOT"}
	}
	var out struct {
		Success bool `json:"success"`
		Result  struct {
			DeliverResults []struct {
				SpaceID  string `json:"spaceId"`
				Success  bool   `json:"success"`
				ErrorMsg string `json:"errorMsg"`
			} `json:"deliverResults"`
		} `json:"result"`
	}
	if err := c.api.call(ctx, "card create", http.MethodPost, "/v1.0/card/instances/createAndDeliver", body, &out); err != nil {
		return err
	}
	for _, dr := range out.Result.DeliverResults {
		if !dr.Success {
			return fmt.Errorf("dingtalk: card create: not delivered to %s: %s", dr.SpaceID, dr.ErrorMsg)
		}
	}
	return nil
}

// streamCard replaces the card's content (isFull) with a new guid per call, as the streaming API
// requires.
func (c *Channel) streamCard(ctx context.Context, outTrackID, content string, finalize, isError bool) error {
	body := map[string]any{
		"outTrackId": outTrackID,
		"guid":       uuid.NewString(),
		"key":        c.cfg.CardContentKey,
		"content":    content,
		"isFull":     true,
		"isFinalize": finalize,
		"isError":    isError,
	}
	return c.api.call(ctx, "card streaming", http.MethodPut, "/v1.0/card/streaming", body, nil)
}

// updateCard merges params into the card's data.
func (c *Channel) updateCard(ctx context.Context, outTrackID string, params map[string]string) error {
	body := map[string]any{
		"outTrackId": outTrackID,
		"cardData":   map[string]any{"cardParamMap": params},
		"cardUpdateOptions": map[string]any{
			"updateCardDataByKey": true,
		},
	}
	return c.api.call(ctx, "card update", http.MethodPut, "/v1.0/card/instances", body, nil)
}

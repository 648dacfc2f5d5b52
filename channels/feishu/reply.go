package feishu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkcardkit "github.com/larksuite/oapi-sdk-go/v3/service/cardkit/v1"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"
	"golang.org/x/time/rate"

	"github.com/citegate/citegate/channels"
)

const (
	// answerElementID is the markdown element the answer streams into.
	answerElementID = "answer"
	// cardOpInterval spaces the operations on one card so that any one-second window holds at most
	// ten of them (CardKit's per-card limit), whatever the caller's pace.
	cardOpInterval = 120 * time.Millisecond
	// placeholder shows in the card until the first text arrives (tools may run for a while).
	placeholder = "正在思考… / Thinking…"
	// emptyAnswer replaces an empty final text (a card element needs at least one character).
	emptyAnswer = "（没有可显示的回答 / no answer to show）"
	// cardBrokenNote heads the text answer when the card stopped taking updates mid-stream, so the
	// user knows why the card above stands unfinished.
	cardBrokenNote = "⚠️ 卡片更新失败，以下为完整回答 / the card could not be updated; the full answer follows.\n\n"
	summaryRunes   = 60
)

// Reply implements channels.Channel: a streaming CardKit card replying to the user's message, or
// plain text replies when CardKit is disabled or the card cannot be created.
func (c *Channel) Reply(_ context.Context, m channels.Message) (channels.Reply, error) {
	ref, err := refOf(m)
	if err != nil {
		return nil, err
	}
	return &reply{
		c:    c,
		ref:  ref,
		card: !c.cfg.DisableCardKit,
		lim:  rate.NewLimiter(rate.Every(cardOpInterval), 1),
	}, nil
}

// Send implements channels.Channel: one plain text reply to m (split when long).
func (c *Channel) Send(ctx context.Context, m channels.Message, text string) error {
	ref, err := refOf(m)
	if err != nil {
		return err
	}
	return c.sendText(ctx, ref, text)
}

func refOf(m channels.Message) (Ref, error) {
	switch r := m.Ref.(type) {
	case Ref:
		if r.MessageID != "" {
			return r, nil
		}
	case *Ref:
		if r != nil && r.MessageID != "" {
			return *r, nil
		}
	}
	if m.ID != "" {
		return Ref{MessageID: m.ID, ChatID: m.ConversationID}, nil
	}
	return Ref{}, errors.New("feishu: message has no message_id to reply to")
}

// sendText replies to ref.MessageID with text messages, split to the size limit.
func (c *Channel) sendText(ctx context.Context, ref Ref, text string) error {
	if strings.TrimSpace(text) == "" {
		text = emptyAnswer
	}
	for _, part := range splitText(text) {
		content, err := json.Marshal(map[string]string{"text": part})
		if err != nil {
			return fmt.Errorf("feishu: encode text: %w", err)
		}
		if _, err := c.replyMessage(ctx, ref.MessageID, "text", string(content)); err != nil {
			return err
		}
	}
	return nil
}

// replyMessage sends one reply; the uuid makes a retried request deliver at most once.
func (c *Channel) replyMessage(ctx context.Context, messageID, msgType, content string) (string, error) {
	id := uuid.NewString()
	var sent string
	err := c.call(ctx, "im.reply", func(ctx context.Context, opt larkcore.RequestOptionFunc) (larkcore.CodeError, error) {
		req := larkim.NewReplyMessageReqBuilder().MessageId(messageID).
			Body(larkim.NewReplyMessageReqBodyBuilder().MsgType(msgType).Content(content).Uuid(id).Build()).
			Build()
		resp, err := c.client.Im.Message.Reply(ctx, req, opt)
		if err != nil {
			return larkcore.CodeError{}, err
		}
		if resp.Data != nil {
			sent = deref(resp.Data.MessageId)
		}
		return resp.CodeError, nil
	})
	return sent, err
}

// reply is one answer's outbound stream.
type reply struct {
	c   *Channel
	ref Ref
	lim *rate.Limiter

	mu     sync.Mutex
	card   bool // streaming into a card; false once CardKit is off or failed
	broken bool // the card was shown but failed mid-stream
	cardID string
	seq    int    // CardKit sequence: strictly increasing over every operation on the card
	shown  string // the card element's current content
	done   bool
}

// Start creates the streaming card and replies with it; on failure the answer falls back to text.
func (r *reply) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.card {
		return nil
	}
	if err := r.createCard(ctx); err != nil {
		r.c.log.Warn("feishu card unavailable, answering with text", "message_id", r.ref.MessageID, "err", err)
		r.card = false
	}
	return nil
}

func (r *reply) createCard(ctx context.Context) error {
	cardJSON, err := json.Marshal(map[string]any{
		"schema": "2.0",
		"config": map[string]any{
			"streaming_mode": true,
			"update_multi":   true,
			"streaming_config": map[string]any{
				"print_frequency_ms": map[string]int{"default": 50},
				"print_step":         map[string]int{"default": 2},
				"print_strategy":     "fast",
			},
		},
		"body": map[string]any{
			"elements": []map[string]string{
				{"tag": "markdown", "element_id": answerElementID, "content": placeholder},
			},
		},
	})
	if err != nil {
		return fmt.Errorf("feishu: encode card: %w", err)
	}
	var cardID string
	err = r.c.call(ctx, "cardkit.create", func(ctx context.Context, opt larkcore.RequestOptionFunc) (larkcore.CodeError, error) {
		if err := r.lim.Wait(ctx); err != nil {
			return larkcore.CodeError{}, err
		}
		req := larkcardkit.NewCreateCardReqBuilder().
			Body(larkcardkit.NewCreateCardReqBodyBuilder().Type("card_json").Data(string(cardJSON)).Build()).
			Build()
		resp, err := r.c.client.Cardkit.V1.Card.Create(ctx, req, opt)
		if err != nil {
			return larkcore.CodeError{}, err
		}
		if resp.Data != nil {
			cardID = deref(resp.Data.CardId)
		}
		return resp.CodeError, nil
	})
	if err != nil {
		return err
	}
	if cardID == "" {
		return errors.New("feishu: cardkit.create: empty card_id")
	}
	content, err := json.Marshal(map[string]any{"type": "card", "data": map[string]string{"card_id": cardID}})
	if err != nil {
		return fmt.Errorf("feishu: encode card reference: %w", err)
	}
	if _, err := r.c.replyMessage(ctx, r.ref.MessageID, "interactive", string(content)); err != nil {
		return err
	}
	r.cardID, r.shown = cardID, placeholder
	return nil
}

// Update shows the text so far in the card. Text replies do not stream, so it does nothing for them.
func (r *reply) Update(ctx context.Context, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.card || r.done {
		return nil
	}
	// The text is safe already (the gateway strips markers and applies the link rule once, for
	// every channel), so each update costs the view only, not another pass over the full text.
	view := streamingView(text)
	if view == "" || view == r.shown {
		return nil
	}
	if err := r.setContent(ctx, view); err != nil {
		// The card cannot take more: Finish and Fail answer with text instead, so nothing is lost.
		r.card, r.broken = false, true
		return err
	}
	return nil
}

// Finish writes the final text into the card and closes streaming; text that does not fit the card
// follows as text replies. Without a card the answer goes out as text replies.
func (r *reply) Finish(ctx context.Context, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	r.done = true
	if strings.TrimSpace(text) == "" {
		text = emptyAnswer
	}
	if !r.card {
		if r.broken {
			text = cardBrokenNote + text
		}
		return r.c.sendText(ctx, r.ref, text)
	}
	cardText, rest := fitCard(text)
	if cardText != r.shown {
		if err := r.setContent(ctx, cardText); err != nil {
			r.c.log.Warn("feishu card final update failed, answering with text", "card_id", r.cardID, "err", err)
			return r.c.sendText(ctx, r.ref, cardBrokenNote+text)
		}
	}
	r.closeStreaming(ctx, text)
	if rest != "" {
		return r.c.sendText(ctx, r.ref, rest)
	}
	return nil
}

// Fail shows the failure in the card under whatever text had streamed, and closes streaming; without
// a card (or when the card fails too) the failure goes out as a text reply.
func (r *reply) Fail(ctx context.Context, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	r.done = true
	reason = strings.TrimSpace(reason)
	if reason == "" {
		reason = "回答失败 / the answer failed"
	}
	note := "⚠️ " + reason
	if !r.card {
		return r.c.sendText(ctx, r.ref, note)
	}
	content := note
	if r.shown != placeholder && r.shown != "" {
		content = streamingView(r.shown + "\n\n---\n" + note)
		if !strings.HasSuffix(content, note) { // no room under the partial text: the note wins
			content = note
		}
	}
	if err := r.setContent(ctx, content); err != nil {
		r.c.log.Warn("feishu card failure update failed, answering with text", "card_id", r.cardID, "err", err)
		return r.c.sendText(ctx, r.ref, note)
	}
	r.closeStreaming(ctx, note)
	return nil
}

// cardOp runs one CardKit operation: paced, with a fresh sequence number and uuid per attempt.
func (r *reply) cardOp(ctx context.Context, op string, fn func(ctx context.Context, seq int, id string, opt larkcore.RequestOptionFunc) (larkcore.CodeError, error)) error {
	return r.c.call(ctx, op, func(ctx context.Context, opt larkcore.RequestOptionFunc) (larkcore.CodeError, error) {
		if err := r.lim.Wait(ctx); err != nil {
			return larkcore.CodeError{}, err
		}
		r.seq++
		return fn(ctx, r.seq, uuid.NewString(), opt)
	})
}

// setContent replaces the answer element's content. When streaming has closed (it does so by itself
// after ten minutes) it is re-opened once and the update retried.
func (r *reply) setContent(ctx context.Context, content string) error {
	err := r.putContent(ctx, content)
	var ae *APIError
	if errors.As(err, &ae) && (ae.Code == codeStreamingTimeout || ae.Code == codeStreamingClosed) {
		r.c.log.Info("feishu card streaming closed, re-opening", "card_id", r.cardID, "code", ae.Code)
		if err2 := r.settings(ctx, map[string]any{"streaming_mode": true}); err2 != nil {
			return err2
		}
		err = r.putContent(ctx, content)
	}
	if err != nil {
		return err
	}
	r.shown = content
	return nil
}

func (r *reply) putContent(ctx context.Context, content string) error {
	return r.cardOp(ctx, "cardkit.content", func(ctx context.Context, seq int, id string, opt larkcore.RequestOptionFunc) (larkcore.CodeError, error) {
		req := larkcardkit.NewContentCardElementReqBuilder().CardId(r.cardID).ElementId(answerElementID).
			Body(larkcardkit.NewContentCardElementReqBodyBuilder().Content(content).Sequence(seq).Uuid(id).Build()).
			Build()
		resp, err := r.c.client.Cardkit.V1.CardElement.Content(ctx, req, opt)
		if err != nil {
			return larkcore.CodeError{}, err
		}
		return resp.CodeError, nil
	})
}

func (r *reply) settings(ctx context.Context, config map[string]any) error {
	settings, err := json.Marshal(map[string]any{"config": config})
	if err != nil {
		return fmt.Errorf("feishu: encode settings: %w", err)
	}
	return r.cardOp(ctx, "cardkit.settings", func(ctx context.Context, seq int, id string, opt larkcore.RequestOptionFunc) (larkcore.CodeError, error) {
		req := larkcardkit.NewSettingsCardReqBuilder().CardId(r.cardID).
			Body(larkcardkit.NewSettingsCardReqBodyBuilder().Settings(string(settings)).Sequence(seq).Uuid(id).Build()).
			Build()
		resp, err := r.c.client.Cardkit.V1.Card.Settings(ctx, req, opt)
		if err != nil {
			return larkcore.CodeError{}, err
		}
		return resp.CodeError, nil
	})
}

// closeStreaming turns streaming off and sets the chat-list summary (while streaming, Feishu shows
// "[生成中...]" there and the card cannot be forwarded). A failure is logged only: the text is in
// the card, and streaming closes by itself after ten minutes.
func (r *reply) closeStreaming(ctx context.Context, text string) {
	err := r.settings(ctx, map[string]any{
		"streaming_mode": false,
		"summary":        map[string]string{"content": summary(text)},
	})
	if err != nil {
		r.c.log.Warn("feishu card close streaming failed", "card_id", r.cardID, "err", err)
	}
}

// summary is the first line-folded runes of text.
func summary(text string) string {
	s := strings.Join(strings.Fields(text), " ")
	if utf8.RuneCountInString(s) <= summaryRunes {
		return s
	}
	rs := []rune(s)
	return string(rs[:summaryRunes]) + "…"
}

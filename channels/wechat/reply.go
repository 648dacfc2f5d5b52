package wechat

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// failNotice is sent when Fail has no reason to show.
const failNotice = "抱歉，这次没能完成回答。"

// reply is one answer to one user. WeChat cannot edit or stream a message, so Update does nothing
// (the dispatcher does not call it, Limits says 0) and Finish sends the whole answer.
type reply struct {
	c      *Channel
	openID string

	mu         sync.Mutex
	stopTyping func()
	typingDone chan struct{}
}

// Start shows the typing indicator and keeps it alive until Finish or Fail. A failure here is only
// logged: the indicator is cosmetic and the answer can still be delivered.
func (r *reply) Start(ctx context.Context) error {
	if err := r.c.api.sendTyping(ctx, r.openID, typingOn); err != nil {
		r.logTyping(err)
		return nil
	}
	if r.c.typingEvery <= 0 {
		return nil
	}
	// The keep-alive outlives Start's caller on purpose; Finish, Fail or typingFor end it. Finish and
	// Fail close stop rather than cancel kctx: a typing request already on its way is allowed to
	// complete, so the platform never receives it after the answer it announced.
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.c.typingFor)
	stop, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.mu.Lock()
	if r.stopTyping != nil {
		r.stopTyping()
	}
	r.stopTyping = func() { once.Do(func() { close(stop) }) }
	r.typingDone = done
	r.mu.Unlock()
	go r.keepTyping(kctx, cancel, stop, done)
	return nil
}

func (r *reply) keepTyping(ctx context.Context, cancel context.CancelFunc, stop <-chan struct{}, done chan struct{}) {
	defer close(done)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			r.c.log.Error("wechat: typing keep-alive panicked", "panic", p)
		}
	}()
	t := time.NewTicker(r.c.typingEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			select {
			case <-stop: // a tick and a stop at once: the answer wins
				return
			default:
			}
			if err := r.c.api.sendTyping(ctx, r.openID, typingOn); err != nil {
				if ctx.Err() == nil {
					r.logTyping(err)
				}
				return
			}
		}
	}
}

func (r *reply) logTyping(err error) {
	var ae *APIError
	if errors.As(err, &ae) {
		r.c.log.Warn("wechat: typing indicator failed", "errcode", ae.Code, "errmsg", ae.Msg)
		return
	}
	r.c.log.Warn("wechat: typing indicator failed", "err", err)
}

// halt stops the typing keep-alive and waits for it, including a typing request in flight, so no
// typing request reaches the platform after the answer.
func (r *reply) halt() {
	r.mu.Lock()
	stop, done := r.stopTyping, r.typingDone
	r.stopTyping, r.typingDone = nil, nil
	r.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Update is a no-op: WeChat messages cannot be edited.
func (r *reply) Update(ctx context.Context, text string) error { return nil }

// Finish sends the answer, split into numbered parts when it is long. Sending a message also clears
// the typing indicator in the user's chat.
func (r *reply) Finish(ctx context.Context, text string) error {
	r.halt()
	return r.c.sendLong(ctx, r.openID, text)
}

// Fail tells the user the answer failed. The dispatcher already phrases reason for the user
// ("抱歉，这次回答失败了：…"), so it is sent as it is; an empty reason gets a generic sentence.
func (r *reply) Fail(ctx context.Context, reason string) error {
	r.halt()
	text := reason
	if strings.TrimSpace(text) == "" {
		text = failNotice
	}
	return r.c.sendLong(ctx, r.openID, text)
}

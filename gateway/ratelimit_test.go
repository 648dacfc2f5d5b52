package gateway

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/time/rate"
)

// TestAllowChatSaysWhenToRetry: with 1 send per minute and a burst of 2, the third send is
// refused with the wait until the next token, refusals do not push that time further away, and
// the send is allowed once the clock gets there.
func TestAllowChatSaysWhenToRetry(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	s := &Server{cfg: Config{Now: func() time.Time { return now }}, limiters: map[string]*rate.Limiter{},
		limRate: rate.Every(time.Minute), limBurst: 2}
	for range 2 {
		ok, _ := s.allowChat("u")
		assert.True(t, ok)
	}
	ok, wait := s.allowChat("u")
	assert.False(t, ok)
	assert.Equal(t, time.Minute, wait)
	now = now.Add(20 * time.Second)
	for range 3 {
		ok, wait = s.allowChat("u")
		assert.False(t, ok)
		assert.Equal(t, 40*time.Second, wait, "a refused send takes nothing from the budget")
	}
	assert.Equal(t, 40, retrySeconds(wait))
	assert.Equal(t, 1, retrySeconds(time.Millisecond))
	now = now.Add(40 * time.Second)
	ok, _ = s.allowChat("u")
	assert.True(t, ok)
	ok, _ = s.allowChat("other")
	assert.True(t, ok, "budgets are per user")
}

// TestChatBurstScalesWithRate: a person's rate keeps a burst of 5; a high limit allows a second's
// worth at once, so 64 sends in the same instant under 10,000,000 a minute are all admitted (they
// were refused after the fifth).
func TestChatBurstScalesWithRate(t *testing.T) {
	assert.Equal(t, 5, chatBurst(20))
	assert.Equal(t, 5, chatBurst(300))
	assert.Equal(t, 6, chatBurst(301))
	assert.Equal(t, 166667, chatBurst(10_000_000))
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	s := &Server{cfg: Config{Now: func() time.Time { return now }}, limiters: map[string]*rate.Limiter{},
		limRate: rate.Limit(10_000_000.0 / 60), limBurst: chatBurst(10_000_000)}
	for i := range 64 {
		ok, _ := s.allowChat("u")
		assert.True(t, ok, "send %d in the same instant", i+1)
	}
}

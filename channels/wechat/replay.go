package wechat

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"
)

// TimestampWindow is how far a push's timestamp may be from the server clock. WeChat signs only
// (token, timestamp, nonce) in plain mode, so a captured signature stays valid forever; the window
// and the replay cache together bound what a captured request is worth.
const TimestampWindow = 300 * time.Second

// replayTTL keeps a (timestamp, nonce) pair at least as long as the window can still accept it:
// a timestamp is accepted for at most 2×TimestampWindow of server time, plus a margin for clock
// steps.
const replayTTL = 2*TimestampWindow + time.Minute

// ReplayGuard remembers keys for a while. MarkSeen returns true when key is new (and records it),
// false when it was recorded within ttl. *store.Store implements it on bbolt, so the cache
// survives a restart; the channel keys it "wechat-replay:<timestamp>:<nonce>".
type ReplayGuard interface {
	MarkSeen(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// memoryGuard is the ReplayGuard used when none is configured (tests, embedding). It does not
// survive a restart; serve wires the store instead.
type memoryGuard struct {
	now func() time.Time

	mu   sync.Mutex
	keys map[string]time.Time // key → expiry
}

func newMemoryGuard(now func() time.Time) *memoryGuard {
	return &memoryGuard{now: now, keys: make(map[string]time.Time)}
}

func (g *memoryGuard) MarkSeen(_ context.Context, key string, ttl time.Duration) (bool, error) {
	if key == "" || ttl <= 0 {
		return false, fmt.Errorf("wechat: replay guard: empty key or non-positive ttl")
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if exp, ok := g.keys[key]; ok && now.Before(exp) {
		return false, nil
	}
	// Pruning on insert keeps the map bounded by the traffic of one ttl.
	for k, exp := range g.keys {
		if !now.Before(exp) {
			delete(g.keys, k)
		}
	}
	g.keys[key] = now.Add(ttl)
	return true, nil
}

// maxRecentBodies bounds recentBodies; beyond it new entries are not remembered, which only makes
// an identical resend look like a replay (refused, and the message was delivered the first time).
const maxRecentBodies = 10000

// recentBodies remembers, in memory, which body each accepted (timestamp, nonce) came with. WeChat
// re-sends the identical request when the first answer is slow; such a resend is answered
// "success" without starting anything again, while the same pair with another body is a replay.
type recentBodies struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]recentBody
}

type recentBody struct {
	digest  [sha256.Size]byte
	expires time.Time
}

func newRecentBodies(now func() time.Time) *recentBodies {
	return &recentBodies{now: now, m: make(map[string]recentBody)}
}

func (r *recentBodies) remember(key string, body []byte) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range r.m {
		if !now.Before(v.expires) {
			delete(r.m, k)
		}
	}
	if len(r.m) >= maxRecentBodies {
		return
	}
	r.m[key] = recentBody{digest: sha256.Sum256(body), expires: now.Add(replayTTL)}
}

// same reports whether key was accepted with exactly this body.
func (r *recentBodies) same(key string, body []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[key]
	return ok && r.now().Before(v.expires) && v.digest == sha256.Sum256(body)
}

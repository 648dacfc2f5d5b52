package gateway

import "sync"

// maxCachedOwners bounds the owner cache; past it the cache starts over (a cache, not a record).
const maxCachedOwners = 100_000

// ownerCache maps session id → owning user id. Sessions never change owner, so an entry never goes
// stale. It is filled where the owner is known anyway (a session created or checked by a client),
// so the events of desktop runs route without touching the store.
type ownerCache struct {
	mu sync.RWMutex
	m  map[string]string
}

func newOwnerCache() *ownerCache { return &ownerCache{m: make(map[string]string)} }

func (o *ownerCache) get(sessionID string) (string, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	u, ok := o.m[sessionID]
	return u, ok
}

func (o *ownerCache) set(sessionID, userID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.m) >= maxCachedOwners {
		o.m = make(map[string]string)
	}
	o.m[sessionID] = userID
}

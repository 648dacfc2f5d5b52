package gateway

import (
	"math"
	"time"
)

// allowChat takes one desktop chat.send from the user's budget. When the budget is spent it takes
// nothing and says how long until one send is allowed again, so the page can tell the user when
// to retry instead of "later".
func (s *Server) allowChat(userID string) (bool, time.Duration) {
	lim := s.limiter(userID)
	now := s.cfg.Now()
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		// A burst below one never allows a send; there is no time to wait for.
		return false, 0
	}
	if d := r.DelayFrom(now); d > 0 {
		// Give the token back: a refused send must not push the next allowed one further away.
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// retrySeconds rounds a wait up to whole seconds (at least one) for a sentence shown to people.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

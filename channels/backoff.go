package channels

import "time"

// Backoff is the pause after n ≥ 1 consecutive failures: base·2^(n-1) capped at maxD, jittered in
// [d/2, d] by rnd (a number in [0, 1), e.g. rand.Float64). The supervisor's restarts and the long
// connections' reconnects share it.
func Backoff(base, maxD time.Duration, n int, rnd func() float64) time.Duration {
	d := base
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	return d/2 + time.Duration(rnd()*float64(d/2))
}

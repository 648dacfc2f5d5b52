package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/store"
)

// Share views.
//
// A view is one successful GET of a share page (/s/{token}) by anyone but the link's owner:
//   - HEAD requests, prefetches (Sec-Purpose / Purpose: prefetch) and the JSONL download do not
//     count; unknown and revoked links render the 404 page and count nothing;
//   - the owner's own look (a request carrying the owner's session cookie or token, as when they
//     open the link from the "Shared links" view) does not count: the figure is meant to say
//     whether anyone else opened the link;
//   - a link unfurler (a chat app fetching the page to preview it) does count: it is one GET like a
//     reader's and cannot be told apart reliably.
//
// Views are counted in memory and written in batches (store.AddShareViews): the first view after a
// flush arms a timer, and every view until it fires joins the same batch, so a link opened a
// thousand times a second costs one small write transaction per interval instead of a thousand,
// and a share page never waits on a write. The owner's list flushes first, so what it shows
// includes every view this process has counted; views counted by other replicas show within their
// interval. A failed write puts its batch back (nothing is lost while the process lives; at most
// one interval of views is lost if it dies). Shutdown flushes.

// defaultShareViewFlush is how long views wait in memory before they are written.
const defaultShareViewFlush = 2 * time.Second

// maxPendingShares bounds the memory of unwritten views while the store refuses writes: past it,
// views of shares not yet in the batch are dropped (and counted in a metric).
const maxPendingShares = 100_000

// viewStore is what the counter asks of the store.
type viewStore interface {
	AddShareViews(ctx context.Context, views []store.ShareViews) error
}

// viewCounter batches share views; see above.
type viewCounter struct {
	st       viewStore
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	pending map[string]store.ShareViews // share id → views not yet written
	timer   *time.Timer                 // armed while pending is not empty
	closed  bool

	flushMu sync.Mutex // one write at a time, so a batch put back is never overtaken

	counted, dropped prometheus.Counter
	flushes          *prometheus.CounterVec
}

func newViewCounter(st viewStore, log *slog.Logger, interval time.Duration, reg prometheus.Registerer) (*viewCounter, error) {
	if interval <= 0 {
		interval = defaultShareViewFlush
	}
	c := &viewCounter{
		st: st, log: log, interval: interval, pending: map[string]store.ShareViews{},
		counted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citegate_share_views_total", Help: "Share page views counted (owner's own views, HEAD and prefetches excluded).",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citegate_share_views_dropped_total", Help: "Share views dropped because too many unwritten views were pending.",
		}),
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "citegate_share_view_flushes_total", Help: "Batched writes of share views, by result.",
		}, []string{"result"}),
	}
	for _, m := range []prometheus.Collector{c.counted, c.dropped, c.flushes} {
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("gateway: share view metrics: %w", err)
		}
	}
	c.flushes.WithLabelValues("ok")
	c.flushes.WithLabelValues("error")
	return c, nil
}

// record counts one view of share id at t.
func (c *viewCounter) record(id string, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.pending[id]
	if !ok && len(c.pending) >= maxPendingShares {
		c.dropped.Inc()
		return
	}
	v.ID = id
	v.Count++
	if t.After(v.Last) {
		v.Last = t
	}
	c.pending[id] = v
	c.counted.Inc()
	c.armLocked()
}

func (c *viewCounter) armLocked() {
	if c.timer != nil || c.closed || len(c.pending) == 0 {
		return
	}
	c.timer = time.AfterFunc(c.interval, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.flush(ctx)
	})
}

// flush writes every pending view in one store call. On failure the batch is merged back into
// pending and the timer re-armed, so the views are tried again.
func (c *viewCounter) flush(ctx context.Context) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	batch := make([]store.ShareViews, 0, len(c.pending))
	for _, v := range c.pending {
		batch = append(batch, v)
	}
	clear(c.pending)
	c.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := c.st.AddShareViews(ctx, batch)
	if err == nil {
		c.flushes.WithLabelValues("ok").Inc()
		return nil
	}
	c.flushes.WithLabelValues("error").Inc()
	c.log.WarnContext(ctx, "share views not written yet; kept for the next try", "shares", len(batch), "err", err)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range batch {
		p := c.pending[v.ID]
		p.ID = v.ID
		p.Count += v.Count
		if v.Last.After(p.Last) {
			p.Last = v.Last
		}
		c.pending[v.ID] = p
	}
	c.armLocked()
	return fmt.Errorf("share views: %w", err)
}

// close stops the timer and writes what is pending; later views are still counted and written by
// the next flush (a server mounted through Handler may keep serving after Close).
func (c *viewCounter) close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	err := c.flush(ctx)
	c.mu.Lock()
	c.closed = false
	c.mu.Unlock()
	return err
}

// countsAsView reports whether a share page request is a view by someone other than ownerID.
func (s *Server) countsAsView(r *http.Request, ownerID string) bool {
	if r.Method != http.MethodGet {
		return false
	}
	for _, h := range []string{"Sec-Purpose", "Purpose", "X-Purpose", "X-Moz"} {
		if strings.Contains(strings.ToLower(r.Header.Get(h)), "prefetch") {
			return false
		}
	}
	if tok, _ := tokenOf(r); tok != "" {
		// Only a request that carries credentials pays for this look-up; a stale or foreign
		// credential is simply not the owner.
		if u, _, err := s.authenticate(r); err == nil && u.ID == ownerID {
			return false
		}
	}
	return true
}

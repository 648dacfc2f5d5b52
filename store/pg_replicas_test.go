package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/citegate/citegate/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Several processes starting at once against one empty database migrate it once (the advisory
// lock), and every one of them works afterwards.
func TestPGConcurrentStartMigratesOnce(t *testing.T) {
	u := newPGSchema(t)
	ctx := context.Background()
	const n = 4
	stores := make([]*store.PG, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = store.OpenPG(ctx, u, store.Options{}) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "process %d", i)
		defer stores[i].Close()
	}
	var versions int
	require.NoError(t, stores[0].Pool().QueryRow(ctx, `SELECT count(*) FROM citegate_schema`).Scan(&versions))
	assert.Equal(t, store.PGSchemaVersion(), versions, "each schema version applied once")
	sess, err := stores[1].CreateSession(ctx, store.Session{UserID: "u"})
	require.NoError(t, err)
	got, err := stores[3].GetSession(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, sess, got, "one database behind every process")
}

// A replica that starts must not fail the runs another live replica is executing; it fails only
// runs whose lease expired, and those of its own earlier life.
func TestPGStartupRecoveryRespectsLeases(t *testing.T) {
	u := newPGSchema(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a, err := store.OpenPG(ctx, u, store.Options{Owner: "replica-a", Now: clock, RunLease: 30 * time.Second})
	require.NoError(t, err)
	defer a.Close()
	sess, err := a.CreateSession(ctx, store.Session{UserID: "u"})
	require.NoError(t, err)
	live, err := a.CreateRun(ctx, store.Run{SessionID: sess.ID})
	require.NoError(t, err)

	// Replica B starts 10 s later: A's lease still runs.
	now = now.Add(10 * time.Second)
	b, err := store.OpenPG(ctx, u, store.Options{Owner: "replica-b", Now: clock})
	require.NoError(t, err)
	defer b.Close()
	assert.Zero(t, b.RecoveredRuns())
	r, err := b.GetRun(ctx, live.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseRunning, r.Phase, "a live replica's run is left alone")

	// Replica C starts after the lease expired without renewal: A is gone, its run is failed.
	now = now.Add(time.Minute)
	c, err := store.OpenPG(ctx, u, store.Options{Owner: "replica-c", Now: clock})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, 1, c.RecoveredRuns())
	r, err = c.GetRun(ctx, live.ID)
	require.NoError(t, err)
	assert.Equal(t, store.PhaseFailed, r.Phase)
	assert.Equal(t, "interrupted", r.Error)
}

// MarkSeen is atomic across processes: of many racing for one platform message id on two
// connections pools, exactly one is told to process it.
func TestPGMarkSeenAcrossProcesses(t *testing.T) {
	u := newPGSchema(t)
	ctx := context.Background()
	a, err := store.OpenPG(ctx, u, store.Options{})
	require.NoError(t, err)
	defer a.Close()
	b, err := store.OpenPG(ctx, u, store.Options{})
	require.NoError(t, err)
	defer b.Close()
	for key := range 5 {
		var mu sync.Mutex
		winners := 0
		var wg sync.WaitGroup
		for i := range 16 {
			st := a
			if i%2 == 1 {
				st = b
			}
			wg.Go(func() {
				fresh, err := st.MarkSeen(ctx, fmt.Sprintf("msg:feishu:%d", key), time.Hour)
				assert.NoError(t, err)
				if fresh {
					mu.Lock()
					winners++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		assert.Equal(t, 1, winners, "key %d", key)
	}
}

// The history window of an old session must read that session's index, not walk the whole table:
// with a cached generic plan, "session_id = $1 AND id < $2 ORDER BY id DESC LIMIT n" is planned
// as a backward walk of the primary key filtered by session, which reads every newer message of
// every other session first.
func TestPGWindowPlanReadsTheSessionIndex(t *testing.T) {
	u := newPGSchema(t)
	ctx := context.Background()
	st, err := store.OpenPG(ctx, u, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	pool := st.Pool()
	_, err = pool.Exec(ctx, `INSERT INTO messages (session_id, role, kind, content, created_at)
		SELECT CASE WHEN g <= 200 THEN 'old' ELSE 'busy' || (g % 3) END, 'USER', (ARRAY['u','c','t','a'])[g % 4 + 1],
			repeat('x', 200), now() FROM generate_series(1, 30000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE messages`)
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	queries := map[string]struct{ sql, args string }{
		"before":        {store.PGListBeforeSQL(false), "('old', 9223372036854775807, 20)"},
		"dialog before": {store.PGListBeforeSQL(true), "('old', 9223372036854775807, 20)"},
		// The newest session read from its start: a primary-key walk would pass every older
		// message of the table first.
		"after": {store.PGListAfterSQL, "('busy1', 0, 20)"},
	}
	for name, q := range queries {
		_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `PREPARE w(text, bigint, int) AS `+q.sql)
		require.NoError(t, err)
		var plan string
		require.NoError(t, conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE w`+q.args).Scan(&plan))
		assert.NotContains(t, plan, "messages_pkey", "%s: %s", name, plan)
		assert.Contains(t, plan, "messages_", "%s: an index scan", name)
		_, err = conn.Exec(ctx, `DEALLOCATE w`)
		require.NoError(t, err)
	}
}

package store

import "context"

// pgRunAheadSQL finds the oldest RUNNING run of $1's session stored before it (lower seq) and
// leased by another owner than $2 (empty: every owner); the partial index
// runs_session_running_idx makes it as long as the session's work in progress.
const pgRunAheadSQL = `WITH me AS (SELECT session_id, seq FROM runs WHERE id = $1)
SELECT ` + pgRunCols + ` FROM runs
WHERE session_id = (SELECT session_id FROM me) AND phase = 'RUNNING' AND seq < (SELECT seq FROM me)
	AND ($2 = '' OR owner <> $2)
ORDER BY seq LIMIT 1`

// RunAhead returns the run a turn waits for before it starts (see Store.RunAhead), in one query.
func (p *PG) RunAhead(ctx context.Context, runID, owner string) (Run, error) {
	var r Run
	err := p.q(ctx, "run ahead", func(q pgq) error {
		var err error
		r, err = scanRun(q.QueryRow(ctx, pgRunAheadSQL, runID, owner))
		return notFound(err, "run ahead of", runID)
	})
	return r, err
}

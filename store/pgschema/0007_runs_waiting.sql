-- A turn waits for the earlier RUNNING runs of its session on other replicas (store/pg_order.go):
-- this index holds only running runs, so the lookup costs the same in a session's first week and
-- after a year of runs.
CREATE INDEX runs_session_running_idx ON runs (session_id, seq) WHERE phase = 'RUNNING';

-- origin records where a chat run's turn came from (the platform message, JSON), so that another
-- replica can tell the conversation when the replica executing the run dies (gateway reaper).
ALTER TABLE runs ADD COLUMN origin text;
-- The renewal of one replica's leases (RenewRunLeases) and the cross-replica cancel (ActiveRun)
-- read only running runs.
CREATE INDEX runs_running_owner_idx ON runs (owner) WHERE phase = 'RUNNING';
CREATE INDEX runs_running_session_idx ON runs (session_id) WHERE phase = 'RUNNING';

-- The job log's queue and bounds (issue 26). Every statement is idempotent
-- and touches only what this file adds, so it applies in any order with
-- other migrations numbered after 001.

-- A sync request is a pending jobs row from the moment it is accepted
-- (store.QueueSync) until the lister starts it; its queue position counts
-- the pending rows ahead of it.
CREATE INDEX IF NOT EXISTS jobs_pending_idx ON jobs (requested_at, id) WHERE status = 'pending';

-- Failed rows are capped per type (store.PruneJobs keeps the newest N).
CREATE INDEX IF NOT EXISTS jobs_failed_idx ON jobs (type, finished_at DESC, id) WHERE status = 'failed';

---- create above / drop below ----

DROP INDEX IF EXISTS jobs_failed_idx;
DROP INDEX IF EXISTS jobs_pending_idx;

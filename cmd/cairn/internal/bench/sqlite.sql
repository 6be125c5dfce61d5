-- The statements `cairn bench` runs itself on the embedded store, in the
-- format of bench.sql (the file holds its tables in the main schema, so
-- there are no markers).

-- name: TablesAnalyze
ANALYZE;

-- name: TaskUnfinishedExists
-- As bench.sql's: one probe of each partial index (tasks_claim_idx or
-- tasks_age_idx, tasks_running_idx). SQLite uses a partial index only
-- for a condition that repeats the index's own, so the one IN of the three
-- states scanned the table: 52 ms a poll at a 20,000-task backlog, polled
-- every 10 ms by the process that runs the workers.
SELECT
   EXISTS (SELECT 1 FROM tasks WHERE status IN ('pending', 'retrying'))
OR EXISTS (SELECT 1 FROM tasks WHERE status = 'running');

-- name: TaskUnfinishedCount
SELECT (SELECT count(*) FROM tasks WHERE status IN ('pending', 'retrying'))
     + (SELECT count(*) FROM tasks WHERE status = 'running');

-- name: DrainSummary
-- Times are microseconds since the epoch, as the embedded store keeps them.
SELECT
  count(*) FILTER (WHERE status = 'completed'),
  count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'dead_lettered')),
  max(finished_at), (SELECT count(*) FROM events)
FROM tasks;

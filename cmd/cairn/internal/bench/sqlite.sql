-- The statements `cairn bench` runs itself on the embedded store, in the
-- format of bench.sql (the file holds its tables in the main schema, so
-- there are no markers).

-- name: TablesAnalyze
ANALYZE;

-- name: TaskUnfinishedExists
SELECT EXISTS (SELECT 1 FROM tasks WHERE status IN ('pending', 'retrying', 'running'));

-- name: TaskUnfinishedCount
SELECT count(*) FROM tasks WHERE status IN ('pending', 'retrying', 'running');

-- name: DrainSummary
-- Times are microseconds since the epoch, as the embedded store keeps them.
SELECT
  count(*) FILTER (WHERE status = 'completed'),
  count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'dead_lettered')),
  max(finished_at), (SELECT count(*) FROM events)
FROM tasks;

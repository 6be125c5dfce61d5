-- The statements `cairn bench` runs itself on the embedded store, in the
-- format of bench.sql (the file holds its tables in the main schema, so
-- there are no markers).

-- name: TablesAnalyze
ANALYZE;

-- name: TaskUnfinishedExists
-- As bench.sql's: one probe of each partial index (tasks_claim_idx,
-- tasks_running_idx). SQLite uses a partial index only for a condition
-- that repeats the index's own, so the one IN of the three states scanned
-- the table: 52 ms a poll at a 20,000-task backlog, polled every 10 ms by
-- the process that runs the workers. The indexes are named (INDEXED BY):
-- with the statistics of the insert's ANALYZE (every task pending) the
-- planner still chose to walk the table in id order, through every task
-- the drain had finished, 47 ms of CPU a poll at a 500,000-task backlog.
SELECT
   EXISTS (SELECT 1 FROM tasks INDEXED BY tasks_claim_idx WHERE status IN ('pending', 'retrying'))
OR EXISTS (SELECT 1 FROM tasks INDEXED BY tasks_running_idx WHERE status = 'running');

-- name: TaskUnfinishedCount
SELECT (SELECT count(*) FROM tasks INDEXED BY tasks_claim_idx WHERE status IN ('pending', 'retrying'))
     + (SELECT count(*) FROM tasks INDEXED BY tasks_running_idx WHERE status = 'running');

-- name: DrainSummary
-- Times are microseconds since the epoch, as the embedded store keeps them.
SELECT
  count(*) FILTER (WHERE status = 'completed'),
  count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'dead_lettered')),
  max(finished_at), (SELECT count(*) FROM events)
FROM tasks;

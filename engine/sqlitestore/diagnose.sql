-- The reads of a queue's diagnosis (diagnose.go); the figures over the
-- window are computed in Go from the histories DiagnoseWindowTasks names.
-- Same format as queries.sql.

-- name: DiagnoseWindowTasks
-- The queue's tasks with an event at or after ?, and their types.
SELECT DISTINCT t.id, t.type FROM events AS e JOIN tasks AS t ON t.id = e.task_id
WHERE e.at >= ? AND t.namespace = ? AND t.queue = ?;

-- name: DiagnoseDepth
-- The waiting tasks of queue (?2, ?3) at ?1, and its settings.
SELECT
    count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'retrying'),
    count(*) FILTER (WHERE run_at <= ?1), min(run_at) FILTER (WHERE run_at <= ?1),
    (SELECT concurrency FROM queues WHERE namespace = ?2 AND name = ?3),
    (SELECT max_waiting FROM queues WHERE namespace = ?2 AND name = ?3)
FROM tasks WHERE namespace = ?2 AND queue = ?3 AND status IN ('pending', 'retrying');

-- name: DiagnoseRunning
-- The queue's running tasks by lease owner, with those whose lease
-- expired before ?.
SELECT lease_owner, count(*), count(*) FILTER (WHERE lease_expires_at < ?)
FROM tasks WHERE namespace = ? AND queue = ? AND status = 'running' GROUP BY lease_owner ORDER BY lease_owner;

-- name: DiagnoseWaitingTypes
-- The waiting tasks of queue (?2, ?3) by type at ?1, and whether the type
-- had an attempt started since ?4.
WITH waiting AS (
    SELECT type, type_version, count(*) AS waiting, count(*) FILTER (WHERE run_at <= ?1) AS due,
        min(run_at) FILTER (WHERE run_at <= ?1) AS oldest_due
    FROM tasks WHERE namespace = ?2 AND queue = ?3 AND status IN ('pending', 'retrying')
    GROUP BY type, type_version
), served AS (
    SELECT DISTINCT t.type, t.type_version FROM events AS e JOIN tasks AS t ON t.id = e.task_id
    WHERE e.at >= ?4 AND e.type = 'attempt_started' AND t.namespace = ?2 AND t.queue = ?3
)
SELECT w.type, w.type_version, w.waiting, w.due, w.oldest_due, s.type IS NOT NULL
FROM waiting AS w LEFT JOIN served AS s ON s.type = w.type AND s.type_version = w.type_version
ORDER BY w.waiting DESC, w.type, w.type_version;

-- name: DiagnoseWaitingKeys
-- The queue's most waited-on fairness keys, at most ?, and how many keys
-- wait in all.
SELECT fairness_key, count(*) AS waiting, count(*) OVER () FROM tasks
WHERE namespace = ? AND queue = ? AND status IN ('pending', 'retrying') AND fairness_key IS NOT NULL
GROUP BY fairness_key ORDER BY waiting DESC, fairness_key LIMIT ?;

-- name: DiagnoseRateLimits
-- The rate limits of the types among ? (a JSON array of type names).
SELECT task_type, max_starts, per_ms FROM rate_limits
WHERE namespace = ? AND task_type IN (SELECT value FROM json_each(?))
ORDER BY task_type;

-- name: QueueStats
-- Every queue of a namespace with unfinished tasks, settings, or finishes
-- in the window: its load now (from the partial indexes on unfinished
-- tasks) and what finished and failed in the window (events by time).
WITH live AS (
    -- One branch per partial index (tasks_claim_idx for waiting tasks,
    -- tasks_running_idx for running ones): finished tasks are never read.
    SELECT queue, sum(waiting) AS waiting, sum(due) AS due, sum(running) AS running, min(oldest_due) AS oldest_due
    FROM (
        SELECT queue, count(*) AS waiting, count(*) FILTER (WHERE run_at <= now()) AS due, 0 AS running,
            min(run_at) FILTER (WHERE run_at <= now()) AS oldest_due
        FROM /* TEMPLATE: schema */tasks
        WHERE namespace = @namespace AND status IN ('pending', 'retrying')
        GROUP BY queue
        UNION ALL
        SELECT queue, 0, 0, count(*), NULL
        FROM /* TEMPLATE: schema */tasks
        WHERE namespace = @namespace AND status = 'running'
        GROUP BY queue
    ) AS branches
    GROUP BY queue
), recent AS (
    SELECT t.queue,
        count(*) FILTER (WHERE e.type = 'task_completed') AS completed,
        count(*) FILTER (WHERE e.type IN ('task_failed', 'task_dead_lettered', 'task_expired')) AS failed,
        count(*) FILTER (WHERE e.type = 'attempt_failed') AS attempts_failed
    FROM /* TEMPLATE: schema */events AS e
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = e.task_id
    WHERE e.at > now() - make_interval(secs => @window_seconds::double precision)
      AND e.type IN ('task_completed', 'task_failed', 'task_dead_lettered', 'task_expired', 'attempt_failed')
      AND t.namespace = @namespace
    GROUP BY t.queue
), settings AS (
    SELECT name AS queue, max_waiting, concurrency FROM /* TEMPLATE: schema */queues WHERE namespace = @namespace
)
SELECT queue, coalesce(waiting, 0)::bigint, coalesce(due, 0)::bigint, coalesce(running, 0)::bigint, oldest_due,
    coalesce(completed, 0), coalesce(failed, 0), coalesce(attempts_failed, 0), max_waiting, concurrency, now()
FROM live FULL JOIN recent USING (queue) FULL JOIN settings USING (queue)
ORDER BY queue;

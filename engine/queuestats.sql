-- name: QueueStats
-- Every queue of a namespace with unfinished tasks, settings, or finishes
-- in the window: its load now (from the partial indexes on unfinished
-- tasks) and what finished and failed in the window (events by time).
WITH live AS (
    SELECT queue,
        count(*) FILTER (WHERE status IN ('pending', 'retrying')) AS waiting,
        count(*) FILTER (WHERE status IN ('pending', 'retrying') AND run_at <= now()) AS due,
        count(*) FILTER (WHERE status = 'running') AS running,
        min(run_at) FILTER (WHERE status IN ('pending', 'retrying') AND run_at <= now()) AS oldest_due
    FROM /* TEMPLATE: schema */tasks
    WHERE namespace = @namespace AND status IN ('pending', 'retrying', 'running')
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
SELECT queue, coalesce(waiting, 0), coalesce(due, 0), coalesce(running, 0), oldest_due,
    coalesce(completed, 0), coalesce(failed, 0), coalesce(attempts_failed, 0), max_waiting, concurrency, now()
FROM live FULL JOIN recent USING (queue) FULL JOIN settings USING (queue)
ORDER BY queue;

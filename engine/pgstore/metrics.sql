-- name: MetricsQueueDepths
-- Tasks per namespace, queue and status for the queue gauges (of
-- @namespace only, unless it is ''), and how long the oldest due waiting
-- task has been due (seconds, by the database clock; NULL when none is).
-- One branch per partial index
-- (tasks_claim_idx, tasks_running_idx, tasks_dead_letter_idx), so a scrape
-- reads only unfinished tasks and dead letters, however many finished ones
-- the table holds.
SELECT namespace, queue, status, count(*) AS tasks,
    extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now() AND status IN ('pending', 'retrying')))::double precision AS oldest_due_seconds
FROM (
    SELECT namespace, queue, status, run_at FROM /* TEMPLATE: schema */tasks WHERE status IN ('pending', 'retrying')
        AND (@namespace::text = '' OR namespace = @namespace)
    UNION ALL
    SELECT namespace, queue, status, run_at FROM /* TEMPLATE: schema */tasks WHERE status = 'running'
        AND (@namespace::text = '' OR namespace = @namespace)
    UNION ALL
    SELECT namespace, queue, status, run_at FROM /* TEMPLATE: schema */tasks WHERE status = 'dead_lettered'
        AND (@namespace::text = '' OR namespace = @namespace)
) AS live
GROUP BY namespace, queue, status
ORDER BY namespace, queue, status;

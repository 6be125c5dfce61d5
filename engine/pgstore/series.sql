-- name: SeriesBegin
-- Bounds each statement of a series read as a diagnosis is bounded, and
-- reads the database clock that ends the window.
SELECT set_config('statement_timeout', @statement_timeout::text, true), now();

-- name: SeriesEvents
-- The window's events of the namespace's tasks (of one queue, or all when
-- @queue is empty), found by time (the BRIN index on events.at), and for
-- each task they touch its last event before the window (cancel_requested,
-- signal_received, child_finished, task_forked and patch_recorded skipped:
-- they keep the status), found by the primary key: the state the task
-- entered the window in. A fork's copied steps (step_completed of attempt
-- 0) are left out of both: they ran in the original, and a fork holding
-- them is pending, not running. "when" is the time the payload names.
WITH win AS (
    SELECT e.task_id, t.queue, e.seq, e.type, e.at,
        coalesce(e.data->>'run_at', e.data->>'next_run_at', e.data->>'fire_at', e.data->>'deadline') AS at_when
    FROM /* TEMPLATE: schema */events AS e
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = e.task_id
    WHERE e.at > @from AND e.at <= @now AND t.namespace = @namespace AND (@queue = '' OR t.queue = @queue)
        AND NOT (e.type = 'step_completed' AND e.attempt = 0)
), firsts AS (
    SELECT task_id, queue, min(seq) AS seq FROM win GROUP BY task_id, queue
)
SELECT task_id::text, queue, seq, type, at, at_when, false AS before FROM win
UNION ALL
SELECT f.task_id::text, f.queue, p.seq, p.type, p.at,
    coalesce(p.data->>'run_at', p.data->>'next_run_at', p.data->>'fire_at', p.data->>'deadline'), true
FROM firsts AS f
CROSS JOIN LATERAL (
    SELECT seq, type, at, data FROM /* TEMPLATE: schema */events AS p
    WHERE p.task_id = f.task_id AND p.seq < f.seq AND p.type NOT IN ('cancel_requested', 'signal_received', 'child_finished', 'task_forked', 'patch_recorded', 'remote_step_completed', 'remote_step_failed')
        AND NOT (p.type = 'step_completed' AND p.attempt = 0)
    ORDER BY p.seq DESC LIMIT 1
) AS p
ORDER BY 1, 3;

-- name: SeriesLive
-- Unfinished tasks no event of the window touched (their row's updated_at,
-- the time of their last event, is before it), grouped by queue, running
-- or waiting, and the first bucket end at or after their run time (the
-- fold's firstEdgeAtOrAfter). One branch per partial index, as QueueStats.
SELECT queue, false AS running,
    least(@buckets::int, greatest(0, ceil(extract(epoch FROM run_at - @from::timestamptz) * 1000000 / @step_us::bigint)::int - 1)) AS due_from,
    count(*)
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND (@queue = '' OR queue = @queue) AND status IN ('pending', 'retrying') AND updated_at <= @from
GROUP BY 1, 2, 3
UNION ALL
SELECT queue, true, 0, count(*)
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND (@queue = '' OR queue = @queue) AND status = 'running' AND updated_at <= @from
GROUP BY 1, 2, 3;

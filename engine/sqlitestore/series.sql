-- name: SeriesEvents
-- The window (?2, ?3] of namespace ?1's events (of queue ?4, or all when
-- it is empty), found by events_at_idx, and for each task they touch its
-- last event before the window (cancel_requested, signal_received,
-- child_finished, task_forked and patch_recorded skipped: they keep the
-- status), by the primary key; a fork's copied steps (step_completed of
-- attempt 0) left out of both. As PostgreSQL's SeriesEvents.
WITH win AS (
    SELECT e.task_id, t.queue, e.seq, e.type, e.at,
        coalesce(json_extract(e.data, '$.run_at'), json_extract(e.data, '$.next_run_at'), json_extract(e.data, '$.fire_at'), json_extract(e.data, '$.deadline')) AS at_when
    FROM events AS e
    JOIN tasks AS t ON t.id = e.task_id
    WHERE e.at > ?2 AND e.at <= ?3 AND t.namespace = ?1 AND (?4 = '' OR t.queue = ?4)
        AND NOT (e.type = 'step_completed' AND e.attempt = 0)
), firsts AS (
    SELECT task_id, queue, min(seq) AS seq FROM win GROUP BY task_id, queue
)
SELECT task_id, queue, seq, type, at, at_when, 0 AS before FROM win
UNION ALL
SELECT f.task_id, f.queue, p.seq, p.type, p.at,
    coalesce(json_extract(p.data, '$.run_at'), json_extract(p.data, '$.next_run_at'), json_extract(p.data, '$.fire_at'), json_extract(p.data, '$.deadline')), 1
FROM firsts AS f
JOIN events AS p ON p.task_id = f.task_id AND p.seq = (
    SELECT max(b.seq) FROM events AS b
    WHERE b.task_id = f.task_id AND b.seq < f.seq AND b.type NOT IN ('cancel_requested', 'signal_received', 'child_finished', 'task_forked', 'patch_recorded', 'remote_step_completed', 'remote_step_failed')
        AND NOT (b.type = 'step_completed' AND b.attempt = 0))
ORDER BY 1, 3;

-- name: SeriesLive
-- Unfinished tasks of namespace ?1 (queue ?4, or all) no event of the
-- window touched (updated_at, the time of their last event, at or before
-- the window's start ?2), grouped by queue, running or waiting, and the
-- first of ?5 bucket ends (each ?6 µs) at or after their run time. As
-- PostgreSQL's SeriesLive.
SELECT queue, status = 'running' AS running,
    CASE WHEN status = 'running' THEN 0
        ELSE min(?5, max(0, (run_at - ?2 + ?6 - 1) / ?6 - 1)) END AS due_from,
    count(*)
FROM tasks
WHERE namespace = ?1 AND (?4 = '' OR queue = ?4) AND status IN ('pending', 'retrying', 'running') AND updated_at <= ?2
GROUP BY 1, 2, 3;

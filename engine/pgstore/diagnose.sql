-- Queue diagnosis (engine/diagnose.go): what a queue's recent history says
-- about why it grows. The statements run in one read-only REPEATABLE READ
-- transaction, so they share one snapshot and one now(). Events are found
-- by time (events.at >= @from: the BRIN index on events(at) serves it) and
-- kept to the queue's tasks through the primary key of tasks; every other
-- event read is a primary-key probe of events (task_id, seq) of a task
-- already found. The window's halves: "then" before @mid, "now" from @mid.
-- No upper bound on at: an event stamped by a writer whose clock runs a
-- little ahead of the database's still counts, in "now".
--
-- Events that end an attempt (the first of them after attempt_started):
-- attempt_failed, lease_expired, task_released, timer_started, wait_started, child_wait_started, remote_wait_started,
-- task_completed, task_failed, task_dead_lettered, task_cancelled.

-- name: DiagnoseBegin
-- Bounds how long each statement of the diagnosis may run (a window read
-- without its index must not hold a connection for minutes), and reads the
-- database clock that ends the window.
SELECT set_config('statement_timeout', @statement_timeout::text, true), now();

-- name: DiagnoseFlow
-- Per half, in total and per task type: tasks created (inflow) and finished
-- (outflow), attempts started, retries (an attempt whose task's previous
-- event is a failure: the next attempt after a timer, a release or a
-- requeue is no retry), attempts failed, leases expired, the workers that
-- started attempts and when the last one started, and how long the
-- attempts that ended in the half took, from their attempt_started
-- (possibly before the window) to the event that ended them. An end event
-- ends an attempt only if no other end event lies between them
-- (attempt_failed then task_dead_lettered is one end).
WITH win AS (
    SELECT e.task_id, e.seq, e.type, e.at, e.attempt, e.data, t.type AS task_type, e.at >= @mid AS is_now
    FROM /* TEMPLATE: schema */events AS e
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = e.task_id
    WHERE e.at >= @from AND t.namespace = @namespace AND t.queue = @queue
), measured AS (
    -- The lookups are scalar subqueries under CASE, not joins: each is a
    -- primary-key probe made only for the rows that need it, whatever the
    -- planner makes of the window's size (a join may become a hash join
    -- over all of events).
    SELECT w.is_now, w.task_type, w.type, w.at, w.data,
        CASE WHEN w.type = 'attempt_started' AND w.attempt > 1 THEN coalesce((
            SELECT p.type IN ('attempt_failed', 'lease_expired') FROM /* TEMPLATE: schema */events AS p
            WHERE p.task_id = w.task_id AND p.seq = w.seq - 1), false)
        ELSE false END AS retry,
        CASE WHEN w.type IN ('attempt_failed', 'lease_expired', 'task_released', 'timer_started', 'wait_started', 'child_wait_started', 'remote_wait_started',
                             'task_completed', 'task_failed', 'task_dead_lettered', 'task_cancelled', 'task_continued') THEN (
            SELECT extract(epoch FROM w.at - s.at) * 1000
            FROM (
                SELECT s.seq, s.at FROM /* TEMPLATE: schema */events AS s
                WHERE s.task_id = w.task_id AND s.seq < w.seq AND s.type = 'attempt_started'
                ORDER BY s.seq DESC
                LIMIT 1
            ) AS s
            WHERE NOT EXISTS (
                SELECT 1 FROM /* TEMPLATE: schema */events AS x
                WHERE x.task_id = w.task_id AND x.seq > s.seq AND x.seq < w.seq
                  AND x.type IN ('attempt_failed', 'lease_expired', 'task_released', 'timer_started', 'wait_started', 'child_wait_started', 'remote_wait_started',
                                 'task_completed', 'task_failed', 'task_dead_lettered', 'task_cancelled', 'task_continued')))
        END AS attempt_ms
    FROM win AS w
)
SELECT is_now, grouping(task_type) = 1 AS total, coalesce(task_type, ''),
    count(*) FILTER (WHERE type = 'task_scheduled'),
    count(*) FILTER (WHERE type IN ('task_completed', 'task_failed', 'task_dead_lettered', 'task_cancelled', 'task_expired', 'task_continued')),
    count(*) FILTER (WHERE type = 'task_completed'),
    count(*) FILTER (WHERE type = 'attempt_started'),
    count(*) FILTER (WHERE type = 'attempt_started' AND retry),
    count(*) FILTER (WHERE type = 'attempt_failed'),
    count(*) FILTER (WHERE type = 'lease_expired'),
    count(attempt_ms),
    coalesce(avg(attempt_ms), 0)::double precision,
    coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY attempt_ms), 0)::double precision,
    coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY attempt_ms), 0)::double precision,
    coalesce(array_agg(DISTINCT data->>'worker_id' ORDER BY data->>'worker_id')
        FILTER (WHERE type = 'attempt_started'), '{}'),
    max(at) FILTER (WHERE type = 'attempt_started')
FROM measured
GROUP BY GROUPING SETS ((is_now), (is_now, task_type))
ORDER BY is_now, total DESC, 3;

-- name: DiagnoseSteps
-- Per half, task type and step name: how long the steps that completed in
-- the half took. A step_completed that records its own duration
-- (duration_ms) is taken at its word; otherwise the step took from the
-- attempt's previous event (its start, the previous step, a fired timer)
-- to its own, consecutive events of one attempt (the previous event is a
-- primary-key probe).
WITH win AS (
    SELECT e.task_id, e.seq, e.at, e.attempt, e.data, t.type AS task_type, e.at >= @mid AS is_now
    FROM /* TEMPLATE: schema */events AS e
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = e.task_id
    WHERE e.at >= @from AND e.type = 'step_completed' AND t.namespace = @namespace AND t.queue = @queue
), measured AS (
    SELECT w.is_now, w.task_type, coalesce(w.data->>'name', '') AS step,
        CASE WHEN w.data ? 'duration_ms' THEN (w.data->>'duration_ms')::double precision ELSE (
            SELECT extract(epoch FROM w.at - p.at) * 1000 FROM /* TEMPLATE: schema */events AS p
            WHERE p.task_id = w.task_id AND p.seq = w.seq - 1 AND p.attempt = w.attempt
              AND p.type IN ('attempt_started', 'step_completed', 'timer_fired'))
        END AS ms
    FROM win AS w
)
SELECT is_now, task_type, step, count(*),
    avg(ms)::double precision,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::double precision,
    percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)::double precision
FROM measured
WHERE ms IS NOT NULL
GROUP BY is_now, task_type, step
ORDER BY is_now, task_type, step;

-- name: DiagnoseErrors
-- Per half, the most common failures (at most @max per half): attempt_failed
-- by task type and error class, kind, status and step, with one message as
-- a sample; an expired lease counts as a transient failure of kind
-- lease_expired (a worker that died or stalled mid-attempt).
WITH failures AS (
    SELECT e.at >= @mid AS is_now, t.type AS task_type,
        CASE WHEN e.type = 'lease_expired' THEN 'transient' ELSE coalesce(e.data->'error'->>'class', '') END AS class,
        CASE WHEN e.type = 'lease_expired' THEN 'lease_expired' ELSE coalesce(e.data->'error'->>'kind', '') END AS kind,
        coalesce((e.data->'error'->>'status')::integer, 0) AS status,
        coalesce(e.data->'error'->>'step', '') AS step,
        coalesce(e.data->'error'->>'message', '') AS message
    FROM /* TEMPLATE: schema */events AS e
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = e.task_id
    WHERE e.at >= @from AND e.type IN ('attempt_failed', 'lease_expired')
      AND t.namespace = @namespace AND t.queue = @queue
), grouped AS (
    SELECT is_now, task_type, class, kind, status, step, count(*) AS n, left(max(message), 300) AS sample,
        row_number() OVER (PARTITION BY is_now ORDER BY count(*) DESC, task_type, kind, status, step) AS rank
    FROM failures
    GROUP BY is_now, task_type, class, kind, status, step
)
SELECT is_now, task_type, class, kind, status, step, n, sample
FROM grouped
WHERE rank <= @max
ORDER BY is_now, rank;

-- name: DiagnoseDepth
-- The queue's waiting tasks now (tasks_claim_idx), how many are due, and
-- how long the longest-waiting due one has waited past its run time; and
-- the queue's settings (a queue without a row has no limits).
SELECT
    count(*) FILTER (WHERE t.status = 'pending'),
    count(*) FILTER (WHERE t.status = 'retrying'),
    count(*) FILTER (WHERE t.run_at <= now()),
    coalesce(extract(epoch FROM now() - min(t.run_at) FILTER (WHERE t.run_at <= now())) * 1000, 0)::double precision,
    (SELECT q.concurrency FROM /* TEMPLATE: schema */queues AS q WHERE q.namespace = @namespace AND q.name = @queue),
    (SELECT q.max_waiting FROM /* TEMPLATE: schema */queues AS q WHERE q.namespace = @namespace AND q.name = @queue)
FROM /* TEMPLATE: schema */tasks AS t
WHERE t.namespace = @namespace AND t.queue = @queue AND t.status IN ('pending', 'retrying');

-- name: DiagnoseRunning
-- The queue's running tasks by lease owner (tasks_running_idx), and how
-- many of each owner's leases have expired: a worker that holds leases it
-- no longer renews has stopped or stalled.
SELECT lease_owner, count(*), count(*) FILTER (WHERE lease_expires_at < now())
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND queue = @queue AND status = 'running'
GROUP BY lease_owner
ORDER BY lease_owner;

-- name: DiagnoseWaitingTypes
-- The queue's waiting tasks by type and version, how many are due and how
-- long the oldest due one has waited, and whether any attempt of that type
-- and version started in the window (a version no running worker has
-- registered never starts).
WITH waiting AS (
    SELECT type, type_version, count(*) AS waiting, count(*) FILTER (WHERE run_at <= now()) AS due,
        min(run_at) FILTER (WHERE run_at <= now()) AS oldest_due
    FROM /* TEMPLATE: schema */tasks
    WHERE namespace = @namespace AND queue = @queue AND status IN ('pending', 'retrying')
    GROUP BY type, type_version
), served AS (
    SELECT DISTINCT t.type, t.type_version
    FROM /* TEMPLATE: schema */events AS e
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = e.task_id
    WHERE e.at >= @from AND e.type = 'attempt_started' AND t.namespace = @namespace AND t.queue = @queue
)
SELECT w.type, w.type_version, w.waiting, w.due,
    coalesce(extract(epoch FROM now() - w.oldest_due) * 1000, 0)::double precision,
    s.type IS NOT NULL
FROM waiting AS w
LEFT JOIN served AS s ON s.type = w.type AND s.type_version = w.type_version
ORDER BY w.waiting DESC, w.type, w.type_version;

-- name: DiagnoseWaitingKeys
-- The fairness keys with the most waiting tasks in the queue
-- (tasks_fairness_idx holds keyed waiting tasks only), at most @max, and
-- how many keys have waiting tasks.
SELECT fairness_key, count(*) AS waiting, count(*) OVER () AS keys
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND queue = @queue AND status IN ('pending', 'retrying') AND fairness_key IS NOT NULL
GROUP BY fairness_key
ORDER BY waiting DESC, fairness_key
LIMIT @max;

-- name: DiagnoseRateLimits
-- The rate limits of the given task types.
SELECT task_type, max_starts, per_ms
FROM /* TEMPLATE: schema */rate_limits
WHERE namespace = @namespace AND task_type = ANY(@types::text[])
ORDER BY task_type;

-- The statements of remote steps (store.RemoteStepInsert and the rest):
-- the rows workers in any language claim by queue. Times are the store's
-- clock (@now), as leases' are.

-- name: RemoteStepInsert
-- The rows of steps just dispatched, their queues announced on the remote
-- channel (payload: namespace/queue) when the transaction commits.
WITH ins AS (
    INSERT INTO /* TEMPLATE: schema */remote_steps
        (task_id, position, namespace, name, queue, attempt, input, heartbeat_ms, start_to_close_ms, dispatched_at)
    SELECT * FROM unnest(@task_ids::uuid[], @positions::integer[], @namespaces::text[], @names::text[], @queues::text[],
        @attempts::integer[], @inputs::bytea[], @heartbeats::bigint[], @start_to_closes::bigint[])
        AS r(task_id, position, namespace, name, queue, attempt, input, heartbeat_ms, start_to_close_ms)
    CROSS JOIN (SELECT @now::timestamptz) AS n
    -- A row left by an earlier attempt (a task requeued before the sweep
    -- removed its rows) is the new attempt's, unclaimed.
    ON CONFLICT (task_id, position) DO UPDATE SET namespace = EXCLUDED.namespace, name = EXCLUDED.name, queue = EXCLUDED.queue,
        attempt = EXCLUDED.attempt, input = EXCLUDED.input, heartbeat_ms = EXCLUDED.heartbeat_ms,
        start_to_close_ms = EXCLUDED.start_to_close_ms, dispatched_at = EXCLUDED.dispatched_at,
        nonce = '', worker = '', claimed_at = NULL, lease_expires_at = NULL
    RETURNING namespace, queue
)
SELECT pg_notify(@channel, q) FROM (SELECT DISTINCT namespace || '/' || queue AS q FROM ins) AS d;

-- name: RemoteStepClaim
-- Claims up to @max unclaimed steps of the namespace's queue (of @names
-- when not empty) for @worker, oldest dispatch first, each under a new
-- nonce and a lease of its heartbeat timeout; steps of tasks finished or
-- cancelled are left for the sweep. Rows another claim locks are skipped.
WITH picked AS (
    SELECT r.task_id, r.position, t.cancel_requested
    FROM /* TEMPLATE: schema */remote_steps AS r
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = r.task_id
    WHERE r.namespace = @namespace AND r.queue = @queue AND r.nonce = ''
      AND (cardinality(@names::text[]) = 0 OR r.name = ANY(@names::text[]))
      AND t.status IN ('pending', 'retrying', 'running') AND NOT t.cancel_requested
    ORDER BY r.dispatched_at, r.task_id, r.position
    LIMIT @max
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE /* TEMPLATE: schema */remote_steps AS r
SET nonce = replace(gen_random_uuid()::text, '-', ''), worker = @worker, claimed_at = @now, stream_bytes = 0, stream_names = '{}',
    lease_expires_at = @now::timestamptz + r.heartbeat_ms * interval '1 millisecond'
FROM picked WHERE r.task_id = picked.task_id AND r.position = picked.position
RETURNING r.namespace, r.task_id, r.position, r.name, r.queue, r.attempt, r.input, r.heartbeat_ms, r.start_to_close_ms,
    r.dispatched_at, r.nonce, r.worker, r.claimed_at, r.lease_expires_at, picked.cancel_requested;

-- name: RemoteStepHeartbeat
-- Extends the lease of the step the claim holds, if it still does, by its
-- heartbeat timeout from @now; returns the new end and the task's cancel.
UPDATE /* TEMPLATE: schema */remote_steps AS r
SET lease_expires_at = @now::timestamptz + r.heartbeat_ms * interval '1 millisecond'
FROM /* TEMPLATE: schema */tasks AS t
WHERE r.task_id = @task_id AND r.position = @position AND r.namespace = @namespace AND r.nonce = @nonce
  AND (cardinality(@queues::text[]) = 0 OR r.queue = ANY(@queues::text[]))
  AND t.id = r.task_id
RETURNING r.lease_expires_at, t.cancel_requested;

-- name: RemoteStepTake
-- Removes the step the claim holds and returns it: what its outcome's
-- append does in the same transaction. With @expired, only if its lease
-- has ended (the rescuer's). The task's row is locked first, so that the
-- outcomes of a fan-out's steps take their turns at the task's history
-- rather than race for it (each would read the history, append, and
-- conflict with the others' appends); the transaction's next statements
-- read the history as the last turn left it.
WITH task AS (
    SELECT id FROM /* TEMPLATE: schema */tasks WHERE id = @task_id FOR UPDATE
)
DELETE FROM /* TEMPLATE: schema */remote_steps AS r
USING task
WHERE r.task_id = task.id AND r.position = @position AND r.namespace = @namespace AND r.nonce = @nonce
  AND (cardinality(@queues::text[]) = 0 OR r.queue = ANY(@queues::text[]))
  AND (NOT @expired::boolean OR r.lease_expires_at <= @now)
RETURNING r.namespace, r.task_id, r.position, r.name, r.queue, r.attempt, r.input, r.heartbeat_ms, r.start_to_close_ms,
    r.dispatched_at, r.nonce, r.worker, r.claimed_at, r.lease_expires_at, false;

-- name: RemoteStepRelease
-- Hands the step the claim holds back to its queue, unclaimed, announced
-- as a dispatch is; counts the steps released (0 or 1).
WITH up AS (
    UPDATE /* TEMPLATE: schema */remote_steps
    SET nonce = '', worker = '', claimed_at = NULL, lease_expires_at = NULL, stream_bytes = 0, stream_names = '{}'
    WHERE task_id = @task_id AND position = @position AND namespace = @namespace AND nonce = @nonce
      AND (cardinality(@queues::text[]) = 0 OR queue = ANY(@queues::text[]))
    RETURNING namespace, queue
)
SELECT count(*) FROM (SELECT pg_notify(@channel, namespace || '/' || queue) FROM up) AS n;

-- name: RemoteStepListExpired
-- Up to @max claimed steps whose lease ended by @now, the earliest first.
SELECT r.namespace, r.task_id, r.position, r.name, r.queue, r.attempt, NULL::bytea, r.heartbeat_ms, r.start_to_close_ms,
    r.dispatched_at, r.nonce, r.worker, r.claimed_at, r.lease_expires_at, false
FROM /* TEMPLATE: schema */remote_steps AS r
WHERE r.nonce <> '' AND r.lease_expires_at <= @now
ORDER BY r.lease_expires_at
LIMIT @max;

-- name: RemoteStepRemoveFinished
-- Removes up to @max rows of tasks finished or gone, and returns them:
-- nothing will collect their outcomes.
DELETE FROM /* TEMPLATE: schema */remote_steps AS r
WHERE (r.task_id, r.position) IN (
    SELECT x.task_id, x.position FROM /* TEMPLATE: schema */remote_steps AS x
    LEFT JOIN /* TEMPLATE: schema */tasks AS t ON t.id = x.task_id
    WHERE t.id IS NULL OR t.status NOT IN ('pending', 'retrying', 'running')
    LIMIT @max)
RETURNING r.namespace, r.task_id, r.position, r.name, r.queue, r.attempt, NULL::bytea, r.heartbeat_ms, r.start_to_close_ms,
    r.dispatched_at, r.nonce, r.worker, r.claimed_at, r.lease_expires_at, false;

-- name: RemoteStreamAppend
-- Writes chunks to the task's streams under the claim, at its step's
-- position and attempt, after the task's last seq, and adds @bytes and
-- the chunks' stream names to what the claim has written, up to
-- @max_bytes and @max_streams, while the task is not finished. The row's
-- update fences the chunks: an outcome that took the row first leaves
-- nothing to update (and one that comes after waits for this statement).
-- Writers of other steps, and the workflow's own attempt, may take the
-- same seqs: the loser fails on the primary key and numbers again.
-- Returns the last seq written; no row when nothing was (see
-- RemoteStreamFull).
WITH step AS (
    UPDATE /* TEMPLATE: schema */remote_steps AS r
    SET stream_bytes = r.stream_bytes + @bytes,
        stream_names = ARRAY(SELECT DISTINCT n FROM unnest(r.stream_names || @streams::text[]) AS u(n))
    WHERE r.task_id = @task_id AND r.position = @position AND r.namespace = @namespace AND r.nonce = @nonce
      AND (cardinality(@queues::text[]) = 0 OR r.queue = ANY(@queues::text[]))
      AND r.stream_bytes + @bytes <= @max_bytes
      AND cardinality(ARRAY(SELECT DISTINCT n FROM unnest(r.stream_names || @streams::text[]) AS u(n))) <= @max_streams
      AND EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS t WHERE t.id = r.task_id AND t.status IN ('pending', 'retrying', 'running'))
    RETURNING r.attempt, r.position
), base AS (
    SELECT coalesce((SELECT max(seq) FROM /* TEMPLATE: schema */stream_entries WHERE task_id = @task_id), 0) AS seq
    FROM step
), ins AS (
    INSERT INTO /* TEMPLATE: schema */stream_entries (task_id, seq, namespace, stream, attempt, position, kind, data, created_at)
    SELECT @task_id, base.seq + e.ord, @namespace, e.stream, step.attempt, step.position, 'chunk', e.data, @now
    FROM step, base, unnest(@streams::text[], @datas::bytea[]) WITH ORDINALITY AS e(stream, data, ord)
    RETURNING seq
), note AS (
    SELECT pg_notify(@channel, @task_id::text) FROM step
)
SELECT max(seq) FROM ins WHERE (SELECT count(*) FROM note) >= 0 HAVING count(*) > 0;

-- name: RemoteStreamFull
-- Whether chunks of @bytes more in @streams would take the claim past its
-- bounds; no row when the claim does not hold the step (or its task has
-- finished).
SELECT r.stream_bytes + @bytes > @max_bytes
    OR cardinality(ARRAY(SELECT DISTINCT n FROM unnest(r.stream_names || @streams::text[]) AS u(n))) > @max_streams
FROM /* TEMPLATE: schema */remote_steps AS r
WHERE r.task_id = @task_id AND r.position = @position AND r.namespace = @namespace AND r.nonce = @nonce
  AND (cardinality(@queues::text[]) = 0 OR r.queue = ANY(@queues::text[]))
  AND EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS t WHERE t.id = r.task_id AND t.status IN ('pending', 'retrying', 'running'));

-- name: RemoteStreamClose
-- Ends or rewinds (@kind) the streams the step at @position left open
-- (their attempt's last entry a chunk), after the task's last seq, in the
-- order they were first written; announces the task when any. Called in
-- the transaction that took or released the step's claim.
WITH last AS (
    SELECT DISTINCT ON (stream, attempt) stream, attempt, kind
    FROM /* TEMPLATE: schema */stream_entries
    WHERE task_id = @task_id AND namespace = @namespace AND position = @position
    ORDER BY stream, attempt, seq DESC
), open AS (
    SELECT l.stream, l.attempt, (SELECT min(f.seq) FROM /* TEMPLATE: schema */stream_entries AS f
        WHERE f.task_id = @task_id AND f.stream = l.stream AND f.position = @position AND f.attempt = l.attempt) AS first
    FROM last AS l WHERE l.kind = 'chunk'
), base AS (
    SELECT coalesce((SELECT max(seq) FROM /* TEMPLATE: schema */stream_entries WHERE task_id = @task_id), 0) AS seq
), ins AS (
    INSERT INTO /* TEMPLATE: schema */stream_entries (task_id, seq, namespace, stream, attempt, position, kind, data, created_at)
    SELECT @task_id, base.seq + row_number() OVER (ORDER BY open.first), @namespace, open.stream, open.attempt, @position, @kind, NULL, @now
    FROM open, base
    RETURNING seq
), note AS (
    SELECT pg_notify(@channel, @task_id::text) WHERE EXISTS (SELECT 1 FROM ins)
)
SELECT count(*) FROM ins WHERE (SELECT count(*) FROM note) >= 0;

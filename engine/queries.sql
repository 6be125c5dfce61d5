-- Every SQL statement the engine runs, one place per query. Each starts with
-- a "-- name: X" line; "/* TEMPLATE: schema */" becomes the configured schema
-- when the store is created. Values are always bind parameters.

-- name: TaskInsert
-- Inserts the projection row and task_scheduled in one statement, and
-- notifies workers on commit. With an idempotency key already taken in the
-- namespace it inserts nothing and returns no row.
WITH ins AS (
    INSERT INTO /* TEMPLATE: schema */tasks (
        id, namespace, queue, type, type_version, status, priority, run_at,
        attempt, max_attempts, idempotency_key, trace_id, input,
        last_seq, created_at, updated_at)
    VALUES (@id, @namespace, @queue, @type, @type_version, 'pending', @priority, @run_at,
        0, @max_attempts, @idempotency_key, @trace_id, @input,
        1, @at, @at)
    ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue
), ev AS (
    INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
    SELECT id, 1, 'task_scheduled', @at, 0, @data FROM ins
)
SELECT ins.id FROM ins CROSS JOIN LATERAL (SELECT pg_notify(@channel, ins.queue)) AS n;

-- name: TaskIDByIdempotencyKey
SELECT id FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND idempotency_key = @idempotency_key;

-- name: TaskClaimMany
-- Claims up to @max due tasks of the given queues and type keys in one round
-- trip: locks them with SKIP LOCKED so concurrent claimers never block each
-- other, starts a new attempt under a new lease epoch, and appends
-- attempt_started. The event payload is the versioned encoding of
-- history.AttemptStartedData.
WITH due AS (
    SELECT id FROM /* TEMPLATE: schema */tasks
    WHERE namespace = @namespace
      AND queue = ANY(@queues::text[])
      AND status IN ('pending', 'retrying')
      AND run_at <= now()
      AND (type || '@' || type_version) = ANY(@type_keys::text[])
    ORDER BY priority DESC, run_at, id
    LIMIT @max
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE /* TEMPLATE: schema */tasks AS t SET
        status = 'running',
        attempt = t.attempt + 1,
        lease_owner = @owner,
        lease_epoch = t.lease_epoch + 1,
        lease_expires_at = now() + make_interval(secs => @lease_seconds),
        last_seq = t.last_seq + 1,
        updated_at = now(),
        started_at = coalesce(t.started_at, now())
    FROM due WHERE t.id = due.id
    RETURNING t.*
), ev AS (
    INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
    SELECT id, last_seq, 'attempt_started', updated_at, attempt,
        jsonb_build_object('v', 1, 'worker_id', lease_owner, 'lease_epoch', lease_epoch,
            'lease_expires_at', lease_expires_at)
    FROM claimed
)
SELECT * FROM claimed;

-- name: EventAppend
-- Appends events and writes the projection row computed by replaying them,
-- in one statement. Optimistic concurrency: nothing is written unless the
-- task is still at @expected_seq and, when @epoch is not 0, still under that
-- lease epoch. lease_expires_at is owned by claims and heartbeats: it is kept
-- while the lease goes on and cleared when it ends.
WITH upd AS (
    UPDATE /* TEMPLATE: schema */tasks SET
        status = @status,
        run_at = @run_at,
        attempt = @attempt,
        lease_owner = @lease_owner,
        lease_epoch = @lease_epoch,
        lease_expires_at = CASE WHEN @lease_owner::text IS NULL THEN NULL ELSE lease_expires_at END,
        output = @output,
        last_error = @last_error,
        cancel_requested = @cancel_requested,
        last_seq = @last_seq,
        updated_at = @updated_at,
        started_at = @started_at,
        finished_at = @finished_at
    WHERE id = @id
      AND last_seq = @expected_seq
      AND (@epoch::bigint = 0 OR lease_epoch = @epoch)
      AND (NOT @expired_only::boolean OR lease_expires_at < now())
    RETURNING id
)
INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
SELECT upd.id, e.seq, e.type, e.at, e.attempt, e.data
FROM upd, unnest(@seqs::bigint[], @types::text[], @ats::timestamptz[], @attempts::integer[], @datas::jsonb[])
    AS e(seq, type, at, attempt, data);

-- name: TaskFenceByID
-- Tells a refused append apart: not found, moved on, or fenced.
SELECT last_seq, lease_epoch FROM /* TEMPLATE: schema */tasks WHERE id = @id;

-- name: LeaseExtendMany
-- Extends the leases still held under the given epochs; a lease not returned
-- is lost.
UPDATE /* TEMPLATE: schema */tasks AS t
SET lease_expires_at = now() + make_interval(secs => @lease_seconds)
FROM unnest(@ids::uuid[], @epochs::bigint[]) AS l(id, epoch)
WHERE t.id = l.id AND t.lease_epoch = l.epoch AND t.status = 'running'
RETURNING t.id;

-- name: TaskListExpired
-- Running tasks whose lease is past its expiry, oldest first.
SELECT id FROM /* TEMPLATE: schema */tasks
WHERE status = 'running' AND lease_expires_at < now()
ORDER BY lease_expires_at
LIMIT @max;

-- name: TaskGetByID
SELECT * FROM /* TEMPLATE: schema */tasks WHERE id = @id AND namespace = @namespace;

-- name: TaskGetManyByID
SELECT * FROM /* TEMPLATE: schema */tasks WHERE id = ANY(@ids::uuid[]);

-- name: TaskList
SELECT * FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace
  AND (@status::text = '' OR status = @status)
  AND (@type::text = '' OR type = @type)
ORDER BY created_at DESC, id DESC
LIMIT @max;

-- name: TaskIDListAll
SELECT id FROM /* TEMPLATE: schema */tasks ORDER BY id;

-- name: EventListByTask
SELECT task_id, seq, type, at, attempt, data FROM /* TEMPLATE: schema */events
WHERE task_id = @task_id ORDER BY seq;

-- name: EventListByTasks
SELECT task_id, seq, type, at, attempt, data FROM /* TEMPLATE: schema */events
WHERE task_id = ANY(@ids::uuid[]) ORDER BY task_id, seq;

-- name: LeaderAttempt
-- Takes or renews the leader lease for @name. Returns a row only when
-- @owner holds the lease afterwards.
INSERT INTO /* TEMPLATE: schema */leaders AS l (name, owner, elected_at, expires_at)
VALUES (@name, @owner, now(), now() + make_interval(secs => @ttl_seconds))
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner,
    elected_at = CASE WHEN l.owner = excluded.owner THEN l.elected_at ELSE now() END,
    expires_at = excluded.expires_at
WHERE l.owner = excluded.owner OR l.expires_at < now()
RETURNING owner;

-- name: LeaderResign
DELETE FROM /* TEMPLATE: schema */leaders WHERE name = @name AND owner = @owner;

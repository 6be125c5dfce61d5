-- The statements of inquiries (store.InquiryCreate and the rest): a
-- client's question for a worker that has a task's code, and its answer.
-- Times are the store's clock (@now), as leases' are.

-- name: InquiryCreate
-- A pending inquiry, announced on the inquiry channel (payload: its
-- namespace) when it commits.
WITH ins AS (
    INSERT INTO /* TEMPLATE: schema */inquiries (id, namespace, task_id, task_type, task_version, kind, name, args, created_at, deadline)
    VALUES (@id, @namespace, @task_id, @task_type, @task_version, @kind, @name, @args, @now, @deadline)
    RETURNING namespace
)
SELECT pg_notify(@channel, namespace) FROM ins;

-- name: InquiryTake
-- Holds up to @max pending inquiries of the namespace's types and kinds
-- for @owner until @until, oldest first: those not past their deadline
-- that no other take holds (a take's hold ends at its taken_until, so a
-- dead worker's are taken again), skipping rows another take locks.
WITH picked AS (
    SELECT i.id FROM /* TEMPLATE: schema */inquiries AS i
    JOIN unnest(@types::text[], @versions::integer[]) AS k(type, version)
        ON i.task_type = k.type AND i.task_version = k.version
    WHERE i.namespace = @namespace AND i.state = 'pending' AND i.kind = ANY(@kinds::text[])
      AND i.deadline > @now AND (i.taken_until IS NULL OR i.taken_until <= @now)
    ORDER BY i.created_at, i.id
    LIMIT @max
    FOR UPDATE OF i SKIP LOCKED
)
UPDATE /* TEMPLATE: schema */inquiries AS i SET taken_by = @owner, taken_until = @until
FROM picked WHERE i.id = picked.id
RETURNING i.id, i.namespace, i.task_id, i.task_type, i.task_version, i.kind, i.name, i.args, i.state, i.answer, i.error_code,
    i.error, i.taken_by, i.taken_until, i.answered_by, i.created_at, i.answered_at, i.deadline;

-- name: InquiryAnswer
-- Answers a pending inquiry, announced on the answered channel (payload:
-- its id) when it commits; counts the inquiries answered (0 or 1).
WITH up AS (
    UPDATE /* TEMPLATE: schema */inquiries
    SET state = 'answered', answer = @answer, error_code = @error_code, error = @error, answered_by = @owner, answered_at = @now
    WHERE id = @id AND namespace = @namespace AND state = 'pending'
    RETURNING id
)
SELECT count(*) FROM (SELECT pg_notify(@channel, id::text) FROM up) AS n;

-- name: InquiryGet
SELECT id, namespace, task_id, task_type, task_version, kind, name, args, state, answer, error_code,
    error, taken_by, taken_until, answered_by, created_at, answered_at, deadline
FROM /* TEMPLATE: schema */inquiries WHERE id = @id AND namespace = @namespace;

-- name: InquiryRemoveExpired
-- Removes up to @max inquiries answered before @before, or pending with a
-- deadline before it.
DELETE FROM /* TEMPLATE: schema */inquiries WHERE id IN (
    (SELECT id FROM /* TEMPLATE: schema */inquiries WHERE state = 'answered' AND answered_at < @before ORDER BY answered_at LIMIT @max)
    UNION ALL
    (SELECT id FROM /* TEMPLATE: schema */inquiries WHERE state = 'pending' AND deadline < @before ORDER BY deadline LIMIT @max)
    LIMIT @max);

-- The statements of streams (stream_entries, kept beside the log: see
-- migrations/0020_streams.up.sql).

-- name: StreamAppend
-- Writes entries to a running task's streams after its last seq, fenced
-- by the writer's lease epoch: the task row is read FOR SHARE, so an
-- append racing a claim (a new epoch) waits for it and then finds the
-- epoch changed, writing nothing. The attempt writes its entries one
-- batch at a time (its flusher), but the claims of the task's remote
-- steps write beside it (RemoteStreamAppend): an append that loses
-- max(seq) + 1 to another fails on the primary key, and the store numbers
-- it again (retryTakenSeq). The task is announced on the stream channel.
-- Returns the last seq written, NULL when fenced.
WITH fence AS (
    SELECT id FROM /* TEMPLATE: schema */tasks
    WHERE id = @task_id AND namespace = @namespace AND status = 'running' AND lease_epoch = @epoch
    FOR SHARE
), base AS (
    SELECT coalesce((SELECT max(seq) FROM /* TEMPLATE: schema */stream_entries WHERE task_id = @task_id), 0) AS seq
    FROM fence
), ins AS (
    INSERT INTO /* TEMPLATE: schema */stream_entries (task_id, seq, namespace, stream, attempt, position, kind, data, created_at)
    SELECT @task_id, base.seq + e.ord, @namespace, e.stream, e.attempt, e.position, e.kind, e.data, @now
    FROM base, unnest(@streams::text[], @attempts::integer[], @positions::integer[], @kinds::text[], @datas::bytea[])
        WITH ORDINALITY AS e(stream, attempt, position, kind, data, ord)
    RETURNING seq
), note AS (
    SELECT pg_notify(@channel, @task_id::text) FROM fence
)
SELECT (SELECT max(seq) FROM ins) WHERE (SELECT count(*) FROM note) >= 0;

-- name: StreamRead
-- A page of a task's entries after @after, in order.
SELECT seq, stream, attempt, position, kind, data, created_at
FROM /* TEMPLATE: schema */stream_entries
WHERE task_id = @task_id AND namespace = @namespace AND seq > @after
  AND (NOT @by_step::boolean OR (position = @position AND attempt = @attempt))
ORDER BY seq
LIMIT @max;

-- name: StreamOpenList
-- The chunks of attempts before @before that no end or rewind closed, by
-- attempt, position and stream.
SELECT c.stream, c.attempt, c.position
FROM /* TEMPLATE: schema */stream_entries AS c
WHERE c.task_id = @task_id AND c.namespace = @namespace AND c.attempt < @before
GROUP BY c.stream, c.attempt, c.position
HAVING bool_and(c.kind = 'chunk')
ORDER BY c.attempt, c.position, c.stream;

-- name: StreamRemove
-- A task's entries (its erasure).
DELETE FROM /* TEMPLATE: schema */stream_entries WHERE task_id = @task_id AND namespace = @namespace;

-- name: StreamRemoveExpired
-- Up to @max of a namespace's entries written before @before, oldest
-- first (its stream TTL).
DELETE FROM /* TEMPLATE: schema */stream_entries
WHERE (task_id, seq) IN (
    SELECT task_id, seq FROM /* TEMPLATE: schema */stream_entries
    WHERE namespace = @namespace AND created_at < @before
    ORDER BY created_at LIMIT @max);

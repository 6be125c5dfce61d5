-- Every SQL statement the embedded store runs, one place per query; the
-- larger features have files of their own (claim.sql, diagnose.sql,
-- schedule.sql, audit.sql) in the same format. Each statement starts with a
-- "-- name: X" line and runs by that name (the store's statement cache is
-- keyed by it). Comment lines are dropped when the files are parsed;
-- /* TASK_COLUMNS */ and /* SCHEDULE_COLUMNS */ become the column lists
-- scanTask and scanSchedule read, in their order.
--
-- Values are always bind parameters. A statement uses either plain "?"
-- throughout or numbered "?N" throughout (where a value is used twice, or
-- an optional filter tests its parameter before comparing with it). A list
-- of values is one parameter, a JSON array, read with json_each: no
-- statement's number of parameters depends on its input.

-- name: MigrationTableCreate
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);

-- name: MigrationCount
SELECT count(*) FROM schema_migrations WHERE version <= ?;

-- name: MigrationApplied
SELECT count(*) FROM schema_migrations WHERE version = ?;

-- name: MigrationRecord
INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?);

-- name: MigrationAppliedAt
SELECT applied_at FROM schema_migrations WHERE version = ?;

-- name: SQLiteVersion
SELECT sqlite_version();

-- name: TaskIDByIdempotencyKey
-- What holds a key, with what a RefuseKeyReuse start compares (see
-- plan.KeyHolder): a task, or else a task retention removed whose key is
-- still retired (?3: now, µs); and whose child a task is, for a child start.
SELECT id, type, input, NULL, 0, parent_id, parent_position FROM tasks WHERE namespace = ?1 AND idempotency_key = ?2
UNION ALL
SELECT task_id, task_type, NULL, input_sha256, 1, NULL, NULL FROM retired_keys
WHERE namespace = ?1 AND idempotency_key = ?2 AND expires_at > ?3
LIMIT 1;

-- name: TaskFairAtLast
-- The virtual start time of the last waiting task of a fairness key
-- (tasks_fairness_idx).
SELECT max(fair_at) FROM tasks WHERE namespace = ? AND queue = ? AND fairness_key = ?
    AND status IN ('pending', 'retrying');

-- name: TaskInsert
INSERT INTO tasks (id, namespace, queue, type, type_version, status, priority, run_at,
    attempt, max_attempts, idempotency_key, trace_id, input, labels, deadline, start_deadline,
    fairness_key, fairness_weight, fair_at, parent_id, parent_position, last_seq, created_at, updated_at, data_key)
VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?);

-- name: EventInsertScheduled
-- A new task's first event, task_scheduled (EventInsert has the others).
INSERT INTO events (task_id, seq, type, at, attempt, data) VALUES (?, 1, ?, ?, 0, ?);

-- name: QueueMaxWaiting
SELECT max_waiting FROM queues WHERE namespace = ? AND name = ?;

-- name: QueueWaitingCount
SELECT count(*) FROM tasks WHERE namespace = ? AND queue = ? AND status IN ('pending', 'retrying');

-- name: QueueRunning
-- The running attempts of a queue and the mean of their tasks' first
-- starts, for a full queue's retry hint.
SELECT count(*), avg(started_at) FROM tasks WHERE namespace = ? AND queue = ? AND status = 'running';

-- name: TaskGetByID
SELECT /* TASK_COLUMNS */ FROM tasks WHERE id = ? AND namespace = ?;

-- name: TaskGetByKey
-- The task holding an idempotency key (a signal by key).
SELECT /* TASK_COLUMNS */ FROM tasks WHERE namespace = ? AND idempotency_key = ?;

-- name: TaskGetMany
-- ?1: a JSON array of ids, of any length; ?2: their namespace, '' for any.
SELECT /* TASK_COLUMNS */ FROM tasks WHERE id IN (SELECT value FROM json_each(?1))
  AND (?2 = '' OR namespace = ?2) ORDER BY id;

-- name: TaskList
-- A page of a namespace's tasks, newest first (UUIDv7), filtered by
-- status, type and queue when those are not ''. ?5 is the id the page
-- starts before, NULL for the first page: a BLOB sorts after every TEXT,
-- so the bound is then past every id, and it stays a constant the primary
-- key seeks on, so a deep page costs what the first does.
SELECT /* TASK_COLUMNS */ FROM tasks
WHERE namespace = ?1
  AND (?2 = '' OR status = ?2)
  AND (?3 = '' OR type = ?3)
  AND (?4 = '' OR queue = ?4)
  AND id < coalesce(?5, x'')
ORDER BY id DESC
LIMIT ?6;

-- name: TaskListLean
-- TaskList without the input and output columns: a listing that does not
-- show payloads reads none (NULL here, nil in Go).
SELECT /* TASK_COLUMNS_LEAN */ FROM tasks
WHERE namespace = ?1
  AND (?2 = '' OR status = ?2)
  AND (?3 = '' OR type = ?3)
  AND (?4 = '' OR queue = ?4)
  AND id < coalesce(?5, x'')
ORDER BY id DESC
LIMIT ?6;

-- name: TaskListPayloads
-- TaskList bounded in payload bytes as well as rows (?7, ?8: whether the
-- input and the output are asked for; ?9: the bound). The walk steps
-- through the selected tasks newest first, one primary-key probe a step,
-- adding up the bytes of the payloads asked for (octet_length reads the
-- size from the record header, not the value); it stops at ?6 rows or at
-- the first task past ?9. The page is the walk's tasks within the bound,
-- and always its first. A payload not asked for is not read (NULL).
WITH RECURSIVE walk (wid, n, bytes) AS (
    SELECT id, 1, size FROM (
        SELECT id,
            CASE WHEN ?7 THEN coalesce(octet_length(input), 0) ELSE 0 END +
            CASE WHEN ?8 THEN coalesce(octet_length(output), 0) ELSE 0 END AS size
        FROM tasks
        WHERE namespace = ?1
          AND (?2 = '' OR status = ?2)
          AND (?3 = '' OR type = ?3)
          AND (?4 = '' OR queue = ?4)
          AND id < coalesce(?5, x'')
        ORDER BY id DESC
        LIMIT 1)
    UNION ALL
    SELECT t.id, w.n + 1, w.bytes +
        CASE WHEN ?7 THEN coalesce(octet_length(t.input), 0) ELSE 0 END +
        CASE WHEN ?8 THEN coalesce(octet_length(t.output), 0) ELSE 0 END
    FROM walk AS w JOIN tasks AS t ON t.id = (
        SELECT nt.id FROM tasks AS nt
        WHERE nt.namespace = ?1
          AND (?2 = '' OR nt.status = ?2)
          AND (?3 = '' OR nt.type = ?3)
          AND (?4 = '' OR nt.queue = ?4)
          AND nt.id < w.wid
        ORDER BY nt.id DESC
        LIMIT 1)
    WHERE w.n < ?6 AND w.bytes <= ?9
)
SELECT /* TASK_COLUMNS_PICKED */
FROM walk AS w JOIN tasks AS t ON t.id = w.wid
WHERE w.n = 1 OR w.bytes <= ?9
ORDER BY t.id DESC;

-- name: EventListByTask
SELECT task_id, seq, type, at, attempt, data FROM events WHERE task_id = ? ORDER BY seq;

-- name: EventListByTasks
-- ?: a JSON array of task ids, of any length.
SELECT task_id, seq, type, at, attempt, data FROM events
WHERE task_id IN (SELECT value FROM json_each(?))
ORDER BY task_id, seq;

-- name: EventListAfter
-- ?: a JSON array of [task id, seq] pairs; the events of each task after
-- its seq, by the primary key.
SELECT e.task_id, e.seq, e.type, e.at, e.attempt, e.data
FROM json_each(?) AS a
JOIN events AS e ON e.task_id = a.value ->> 0 AND e.seq > a.value ->> 1
ORDER BY e.task_id, e.seq;

-- name: EventListAfterIn
-- EventListAfter (?1) of the tasks of namespace ?2 only (a request's read).
SELECT e.task_id, e.seq, e.type, e.at, e.attempt, e.data
FROM json_each(?1) AS a
JOIN tasks AS t ON t.id = a.value ->> 0 AND t.namespace = ?2
JOIN events AS e ON e.task_id = a.value ->> 0 AND e.seq > a.value ->> 1
ORDER BY e.task_id, e.seq;

-- name: DeadLetterList
-- A page of a namespace's dead letters, newest first, from
-- tasks_dead_letter_idx; when ?3 (paged), the page starts after the
-- (finished_at, id) ?4, ?5 of the last row of the previous page.
SELECT /* TASK_COLUMNS */ FROM tasks
WHERE status = 'dead_lettered' AND namespace = ?1
  AND (?2 = '' OR type = ?2)
  AND (NOT ?3 OR finished_at < ?4 OR (finished_at = ?4 AND id < ?5))
ORDER BY finished_at DESC, id DESC
LIMIT ?6;

-- name: DeadLetterListLean
-- DeadLetterList without the input and output columns.
SELECT /* TASK_COLUMNS_LEAN */ FROM tasks
WHERE status = 'dead_lettered' AND namespace = ?1
  AND (?2 = '' OR type = ?2)
  AND (NOT ?3 OR finished_at < ?4 OR (finished_at = ?4 AND id < ?5))
ORDER BY finished_at DESC, id DESC
LIMIT ?6;

-- name: TaskListExpired
-- Running tasks whose lease expired before ? (now, less the time a lease
-- must have been expired) (tasks_lease_idx), oldest expiry first.
SELECT id FROM tasks WHERE status = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at LIMIT ?;

-- name: TaskLeaseNextExpiry
-- The first lease expiry at or after ? that TaskListExpired does not list
-- yet (NULL: none): the first entry of tasks_lease_idx past the cut.
-- The first entry, not min(): see ClaimOutlook.
SELECT (SELECT lease_expires_at FROM tasks WHERE status = 'running' AND lease_expires_at >= ?
    ORDER BY lease_expires_at LIMIT 1);

-- name: TaskListStartExpired
SELECT id FROM tasks WHERE status = 'pending' AND attempt = 0 AND start_deadline IS NOT NULL
    AND start_deadline <= ? ORDER BY start_deadline LIMIT ?;

-- name: LeaderAttempt
-- Takes or renews the lease of a leadership: its owner renews it; anyone
-- takes it once it has expired. Returns the owner when it wrote.
INSERT INTO leaders (name, owner, elected_at, expires_at) VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner,
    elected_at = CASE WHEN leaders.owner = excluded.owner THEN leaders.elected_at ELSE excluded.elected_at END,
    expires_at = excluded.expires_at
WHERE leaders.owner = excluded.owner OR leaders.expires_at < ?
RETURNING owner;

-- name: LeaderResign
DELETE FROM leaders WHERE name = ? AND owner = ?;

-- name: QueueUpsert
INSERT INTO queues (namespace, name, max_waiting, concurrency, updated_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (namespace, name) DO UPDATE SET max_waiting = excluded.max_waiting, concurrency = excluded.concurrency,
    updated_at = excluded.updated_at;

-- name: QueueList
SELECT q.name, coalesce(q.max_waiting, 0), coalesce(q.concurrency, 0),
    (SELECT count(*) FROM tasks AS t WHERE t.namespace = q.namespace AND t.queue = q.name AND t.status IN ('pending', 'retrying')),
    (SELECT count(*) FROM tasks AS t WHERE t.namespace = q.namespace AND t.queue = q.name AND t.status = 'running')
FROM queues AS q WHERE q.namespace = ? ORDER BY q.name;

-- name: QueueWaits
SELECT queue, priority, count(*), min(run_at) FROM tasks
WHERE namespace = ? AND status IN ('pending', 'retrying') AND run_at <= ?
GROUP BY queue, priority ORDER BY queue, priority DESC;

-- name: RateLimitUpsert
-- A new or changed bucket starts full (a lowered limit keeps fewer tokens).
INSERT INTO rate_limits (namespace, task_type, max_starts, per_ms, tokens, refilled_at)
VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, task_type) DO UPDATE SET max_starts = excluded.max_starts,
    per_ms = excluded.per_ms, tokens = min(rate_limits.tokens, excluded.max_starts), refilled_at = excluded.refilled_at;

-- name: RateLimitDelete
DELETE FROM rate_limits WHERE namespace = ? AND task_type = ?;

-- name: TaskTypeRegister
INSERT INTO task_types (namespace, type, version, queue, max_attempts, schedule_to_close_ms,
    registered_by, registered_at, signals) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, type, version) DO UPDATE SET queue = excluded.queue, max_attempts = excluded.max_attempts,
    schedule_to_close_ms = excluded.schedule_to_close_ms, registered_by = excluded.registered_by,
    registered_at = excluded.registered_at, signals = excluded.signals;

-- name: TaskTypeList
SELECT namespace, type, version, queue, max_attempts, schedule_to_close_ms, registered_by, registered_at, signals
FROM task_types WHERE namespace = ? ORDER BY type, version;

-- name: MetricsQueueDepths
-- Tasks by namespace, queue and status (of namespace ?2 only, unless it is
-- ''), with the oldest due run time (before ?1) of the waiting ones.
SELECT namespace, queue, status, count(*),
    min(CASE WHEN run_at <= ?1 AND status IN ('pending', 'retrying') THEN run_at END)
FROM tasks WHERE status IN ('pending', 'retrying', 'running', 'dead_lettered')
    AND (?2 = '' OR namespace = ?2)
GROUP BY namespace, queue, status ORDER BY namespace, queue, status;

-- name: QueueStats
-- Every queue of namespace ?1 with unfinished tasks, settings, or finishes
-- since ?3; ?2 is now.
WITH live AS (
    SELECT queue,
        sum(status IN ('pending', 'retrying')) AS waiting,
        sum(status IN ('pending', 'retrying') AND run_at <= ?2) AS due,
        sum(status = 'running') AS running,
        min(CASE WHEN status IN ('pending', 'retrying') AND run_at <= ?2 THEN run_at END) AS oldest_due
    FROM tasks WHERE namespace = ?1 AND status IN ('pending', 'retrying', 'running') GROUP BY queue
), recent AS (
    SELECT t.queue,
        sum(e.type = 'task_completed') AS completed,
        sum(e.type IN ('task_failed', 'task_dead_lettered', 'task_expired')) AS failed,
        sum(e.type = 'attempt_failed') AS attempts_failed
    FROM events AS e JOIN tasks AS t ON t.id = e.task_id
    WHERE e.at > ?3 AND t.namespace = ?1
        AND e.type IN ('task_completed', 'task_failed', 'task_dead_lettered', 'task_expired', 'attempt_failed')
    GROUP BY t.queue
), names AS (
    SELECT queue FROM live UNION SELECT queue FROM recent UNION SELECT name FROM queues WHERE namespace = ?1
)
SELECT n.queue, coalesce(l.waiting, 0), coalesce(l.due, 0), coalesce(l.running, 0), l.oldest_due,
    coalesce(r.completed, 0), coalesce(r.failed, 0), coalesce(r.attempts_failed, 0),
    coalesce(q.max_waiting, 0), coalesce(q.concurrency, 0)
FROM names AS n
LEFT JOIN live AS l ON l.queue = n.queue
LEFT JOIN recent AS r ON r.queue = n.queue
LEFT JOIN queues AS q ON q.namespace = ?1 AND q.name = n.queue
ORDER BY n.queue;

-- name: TaskRemovable
-- As PostgreSQL's TaskRemovableLock (the write transaction is the lock):
-- ?1 namespace, ?2 finished before (µs), ?3 max, ?5 the types with
-- their own cutoff ([[type, µs], …]), ?6 the latest cutoff of all.
SELECT t.id, t.idempotency_key, t.type, CASE WHEN t.idempotency_key IS NOT NULL THEN t.input END FROM tasks AS t
WHERE t.namespace = ?1 AND t.finished_at IS NOT NULL AND t.finished_at < ?6
  AND t.finished_at < coalesce((SELECT o.value ->> 1 FROM json_each(?5) AS o WHERE o.value ->> 0 = t.type), ?2)
  AND t.status IN ('completed', 'failed', 'cancelled', 'dead_lettered', 'expired', 'continued')
  AND NOT EXISTS (SELECT 1 FROM tasks AS c WHERE c.parent_id = t.id AND c.finished_at IS NULL)
  AND (t.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM tasks AS p WHERE p.id = t.parent_id AND p.finished_at IS NULL))
  -- ?4, when not NULL: only the tasks of its [id, last seq] pairs (what
  -- an archive holds of them).
  AND (?4 IS NULL OR EXISTS (SELECT 1 FROM json_each(?4) AS o
                             WHERE o.value ->> 0 = t.id AND o.value ->> 1 = t.last_seq))
ORDER BY t.finished_at
LIMIT ?3;

-- name: TaskRemovableList
-- The tasks TaskRemovable would take (?1 namespace, ?2 finished before
-- (µs), ?3 max, ?4 and ?5 as TaskRemovable's ?5 and ?6), for archival to
-- read before the removal.
SELECT t.id FROM tasks AS t
WHERE t.namespace = ?1 AND t.finished_at IS NOT NULL AND t.finished_at < ?5
  AND t.finished_at < coalesce((SELECT o.value ->> 1 FROM json_each(?4) AS o WHERE o.value ->> 0 = t.type), ?2)
  AND t.status IN ('completed', 'failed', 'cancelled', 'dead_lettered', 'expired', 'continued')
  AND NOT EXISTS (SELECT 1 FROM tasks AS c WHERE c.parent_id = t.id AND c.finished_at IS NULL)
  AND (t.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM tasks AS p WHERE p.id = t.parent_id AND p.finished_at IS NULL))
ORDER BY t.finished_at
LIMIT ?3;

-- name: RemovingMark
INSERT INTO removing (task_id) SELECT value FROM json_each(?);

-- name: RetiredKeyInsert
-- ?1 namespace, ?2 key, ?3 task id, ?4 type, ?5 input digest, ?6 now,
-- ?7 expires (µs).
INSERT INTO retired_keys (namespace, idempotency_key, task_id, task_type, input_sha256, removed_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (namespace, idempotency_key) DO UPDATE
    SET task_id = excluded.task_id, task_type = excluded.task_type, input_sha256 = excluded.input_sha256,
        removed_at = excluded.removed_at, expires_at = excluded.expires_at;

-- name: EventsRemove
DELETE FROM events WHERE task_id IN (SELECT task_id FROM removing);

-- name: StreamsRemove
-- The stream entries of the tasks listed in removing.
DELETE FROM stream_entries WHERE task_id IN (SELECT task_id FROM removing);

-- name: BudgetReservationsRemove
-- The open budget reservations of the tasks listed in removing.
DELETE FROM budget_reservations WHERE task_id IN (SELECT task_id FROM removing);

-- name: BudgetWaitsRemove
DELETE FROM budget_waits WHERE task_id IN (SELECT task_id FROM removing);

-- name: BudgetWindowsRemove
-- The window of each removed task's own budget (ref task:<id>).
DELETE FROM budget_windows WHERE namespace = ?1 AND ref IN (SELECT 'task:' || task_id FROM removing);

-- name: TasksRemove
DELETE FROM tasks WHERE id IN (SELECT task_id FROM removing);

-- name: RemovingClear
DELETE FROM removing;

-- name: RetiredKeysExpire
-- Drops up to ?2 retired keys past their time (?1, µs).
DELETE FROM retired_keys WHERE rowid IN (
    SELECT rowid FROM retired_keys WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2);

-- name: NamespaceUpsert
INSERT INTO namespaces (name, retention_ms, key_retention_ms, updated_at, archive, type_retention, stream_ttl_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (name) DO UPDATE
SET retention_ms = excluded.retention_ms, key_retention_ms = excluded.key_retention_ms, updated_at = excluded.updated_at,
    archive = excluded.archive, type_retention = excluded.type_retention, stream_ttl_ms = excluded.stream_ttl_ms;

-- name: NamespaceList
-- The namespaces with settings, and those with finished tasks, found by a
-- skip scan of tasks_finished_idx (one probe per namespace: a DISTINCT
-- would read every finished task at each leader pass).
WITH RECURSIVE seen(ns) AS (
    SELECT (SELECT min(namespace) FROM tasks WHERE finished_at IS NOT NULL)
    UNION ALL
    SELECT (SELECT min(namespace) FROM tasks WHERE finished_at IS NOT NULL AND namespace > seen.ns)
    FROM seen WHERE seen.ns IS NOT NULL
)
SELECT name, max(retention_ms), max(key_retention_ms), max(archive), max(type_retention), max(stream_ttl_ms),
    -- The oldest finished task kept: the namespace's first entry of
    -- tasks_finished_idx.
    (SELECT min(t.finished_at) FROM tasks AS t WHERE t.namespace = name AND t.finished_at IS NOT NULL)
FROM (
    SELECT name, retention_ms, key_retention_ms, archive, type_retention, stream_ttl_ms FROM namespaces
    UNION ALL
    SELECT ns, NULL, NULL, NULL, NULL, NULL FROM seen WHERE ns IS NOT NULL
) GROUP BY name ORDER BY name;

-- name: BlobInsert
-- ?1 namespace, ?2 key, ?3 task id, ?4 content type, ?5 size, ?6 sha256,
-- ?7 data, ?8 now (µs), ?9 location (NULL: the bytes are here).
INSERT INTO blobs (namespace, key, task_id, content_type, size, sha256, data, created_at, location)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9);

-- name: BlobGet
SELECT task_id, content_type, sha256, data, created_at, location, size FROM blobs WHERE namespace = ?1 AND key = ?2;

-- name: BlobsStoredOfRemoving
-- The blobs of the tasks listed in removing whose bytes are in a blob store.
SELECT key, task_id, location FROM blobs WHERE task_id IN (SELECT task_id FROM removing) AND location IS NOT NULL;

-- name: BlobsRemove
-- The blobs of the tasks listed in removing.
DELETE FROM blobs WHERE task_id IN (SELECT task_id FROM removing);

-- name: TaskDataKeyErase
-- task_erased's write of the row: the data key is destroyed.
UPDATE tasks SET data_key = NULL WHERE id = ?;

-- name: TaskDataKeys
-- ?1: a JSON array of task ids, of any length; ?2 their namespace, or ''
-- for any.
SELECT id, data_key FROM tasks WHERE id IN (SELECT value FROM json_each(?1)) AND data_key IS NOT NULL
  AND (?2 = '' OR namespace = ?2);

-- name: TaskDataKeySet
-- As PostgreSQL's TaskDataKeySet; TaskDataKeyGet then reads what it holds.
UPDATE tasks SET data_key = ?2
WHERE id = ?1 AND data_key IS NULL AND status IN ('pending', 'running', 'retrying');

-- name: TaskDataKeyGet
SELECT data_key FROM tasks WHERE id = ?;

-- name: BlobKeysByTasks
-- ?1 namespace, ?2 a JSON array of task ids.
SELECT task_id, key FROM blobs WHERE namespace = ?1 AND task_id IN (SELECT value FROM json_each(?2)) ORDER BY task_id, key;

-- name: SignalSeen
-- Whether task ?1 received a signal with dedup id ?2, by the partial
-- index events_signal_dedup (its expression, as SQLite requires; named,
-- as without statistics the planner walks the primary key, reading every
-- event's data).
SELECT EXISTS (SELECT 1 FROM events INDEXED BY events_signal_dedup
               WHERE task_id = ?1 AND type = 'signal_received' AND json_extract(data, '$.dedup_id') = ?2);

-- name: WaitOpen
-- PostgreSQL's WaitOpen: the wait_started of the wait task ?1 is in after
-- its first ?2 events, by the partial indexes events_waits and
-- events_signal_name, named as in SignalSeen; a select's wait ends as
-- PostgreSQL's says.
SELECT w.data FROM (
    SELECT seq, type, data FROM events INDEXED BY events_waits
    WHERE task_id = ?1 AND seq <= ?2 AND type IN ('wait_started', 'wait_timed_out')
    ORDER BY seq DESC LIMIT 1
) AS w
WHERE w.type = 'wait_started'
  AND NOT EXISTS (SELECT 1 FROM events AS s INDEXED BY events_signal_name
                  WHERE s.task_id = ?1 AND s.type = 'signal_received'
                    AND json_extract(s.data, '$.name') = json_extract(w.data, '$.name')
                    AND s.seq > w.seq AND s.seq <= ?2)
  AND NOT EXISTS (SELECT 1 FROM events AS x
                  WHERE json_type(w.data, '$.select') IS NOT NULL
                    AND x.task_id = ?1 AND x.seq > w.seq AND x.seq <= ?2
                    AND (x.type = 'select_matched'
                         OR (x.type = 'signal_received' AND EXISTS (SELECT 1 FROM json_each(w.data, '$.select.signals') AS n
                                                                    WHERE n.value = json_extract(x.data, '$.name')))
                         OR (x.type = 'child_finished' AND EXISTS (SELECT 1 FROM json_each(w.data, '$.select.children') AS c
                                                                   WHERE c.value = json_extract(x.data, '$.position')))));

-- name: EventListPage
-- PostgreSQL's EventListPage: events of task ?1 in namespace ?2 after seq
-- ?3, at most ?4.
SELECT e.seq, e.type, e.at, e.attempt, e.data FROM events AS e
WHERE e.task_id = ?1 AND e.seq > ?3
  AND EXISTS (SELECT 1 FROM tasks AS t WHERE t.id = ?1 AND t.namespace = ?2)
ORDER BY e.seq
LIMIT ?4;

-- name: StrandedDelete
DELETE FROM stranded_tasks WHERE namespace = ? AND type = ? AND version = ? AND worker_id = ?;

-- name: StrandedInsert
INSERT INTO stranded_tasks (namespace, type, version, worker_id, task_id, kind, position, recorded, called, error, found_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: StrandedList
-- Findings of tasks not finished, oldest found first (namespace, type or
-- '' for all, limit, queue or '' for all).
SELECT s.namespace, s.type, s.version, s.worker_id, s.task_id, s.kind, s.position, s.recorded, s.called, s.error,
    s.found_at, t.status, t.run_at, t.queue
FROM stranded_tasks AS s JOIN tasks AS t ON t.id = s.task_id AND t.namespace = s.namespace
WHERE s.namespace = ?1 AND (?2 = '' OR s.type = ?2) AND (?4 = '' OR t.queue = ?4) AND t.status IN ('pending', 'running', 'retrying')
ORDER BY s.found_at, s.task_id
LIMIT ?3;

-- The statements of remote steps (store.RemoteStepInsert and the rest).
-- Times in µs, by the store's clock.

-- name: RemoteStepInsert
-- A row left by an earlier attempt (a task requeued before the sweep) is
-- the new attempt's, unclaimed.
INSERT INTO remote_steps (task_id, position, namespace, name, queue, attempt, input, heartbeat_ms, start_to_close_ms, dispatched_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (task_id, position) DO UPDATE SET namespace = excluded.namespace, name = excluded.name, queue = excluded.queue,
    attempt = excluded.attempt, input = excluded.input, heartbeat_ms = excluded.heartbeat_ms,
    start_to_close_ms = excluded.start_to_close_ms, dispatched_at = excluded.dispatched_at,
    nonce = '', worker = '', claimed_at = NULL, lease_expires_at = NULL;

-- name: RemoteStepClaim
-- Claims up to ?4 unclaimed steps of namespace ?1's queue ?2 (of the
-- names in ?3, a JSON array, when it is not empty) for ?5 at ?6, oldest
-- dispatch first, each under a new nonce and a lease of its heartbeat
-- timeout; steps of tasks finished or cancelled are left for the sweep.
UPDATE remote_steps AS r
SET nonce = lower(hex(randomblob(16))), worker = ?5, claimed_at = ?6, lease_expires_at = ?6 + r.heartbeat_ms * 1000, stream_bytes = 0, stream_names = '[]'
WHERE (r.task_id, r.position) IN (
    SELECT x.task_id, x.position FROM remote_steps AS x
    JOIN tasks AS t ON t.id = x.task_id
    WHERE x.namespace = ?1 AND x.queue = ?2 AND x.nonce = ''
      AND (json_array_length(?3) = 0 OR x.name IN (SELECT value FROM json_each(?3)))
      AND t.status IN ('pending', 'retrying', 'running') AND NOT t.cancel_requested
    ORDER BY x.dispatched_at, x.task_id, x.position
    LIMIT ?4)
RETURNING namespace, task_id, position, name, queue, attempt, input, heartbeat_ms, start_to_close_ms,
    dispatched_at, nonce, worker, claimed_at, lease_expires_at, 0;

-- name: RemoteStepHeartbeat
-- Only for a task that exists, as PostgreSQL's join: a step of a task
-- gone is not held.
UPDATE remote_steps SET lease_expires_at = ?5 + heartbeat_ms * 1000
WHERE task_id = ?1 AND position = ?2 AND namespace = ?3 AND nonce = ?4
  AND (json_array_length(?6) = 0 OR queue IN (SELECT value FROM json_each(?6)))
  AND EXISTS (SELECT 1 FROM tasks AS t WHERE t.id = remote_steps.task_id)
RETURNING lease_expires_at, (SELECT t.cancel_requested FROM tasks AS t WHERE t.id = remote_steps.task_id);

-- name: RemoteStepTake
-- With ?6, only if its lease has ended by ?5 (the rescuer's).
DELETE FROM remote_steps
WHERE task_id = ?1 AND position = ?2 AND namespace = ?3 AND nonce = ?4 AND (NOT ?6 OR lease_expires_at <= ?5)
  AND (json_array_length(?7) = 0 OR queue IN (SELECT value FROM json_each(?7)))
RETURNING namespace, task_id, position, name, queue, attempt, input, heartbeat_ms, start_to_close_ms,
    dispatched_at, nonce, worker, claimed_at, lease_expires_at, 0;

-- name: RemoteStepRelease
UPDATE remote_steps SET nonce = '', worker = '', claimed_at = NULL, lease_expires_at = NULL, stream_bytes = 0, stream_names = '[]'
WHERE task_id = ?1 AND position = ?2 AND namespace = ?3 AND nonce = ?4
  AND (json_array_length(?5) = 0 OR queue IN (SELECT value FROM json_each(?5)))
RETURNING queue;

-- name: RemoteStepListExpired
SELECT namespace, task_id, position, name, queue, attempt, NULL, heartbeat_ms, start_to_close_ms,
    dispatched_at, nonce, worker, claimed_at, lease_expires_at, 0
FROM remote_steps WHERE nonce <> '' AND lease_expires_at <= ?1
ORDER BY lease_expires_at LIMIT ?2;

-- name: RemoteStepRemoveFinished
DELETE FROM remote_steps WHERE (task_id, position) IN (
    SELECT x.task_id, x.position FROM remote_steps AS x
    LEFT JOIN tasks AS t ON t.id = x.task_id
    WHERE t.id IS NULL OR t.status NOT IN ('pending', 'retrying', 'running')
    LIMIT ?1)
RETURNING namespace, task_id, position, name, queue, attempt, NULL, heartbeat_ms, start_to_close_ms,
    dispatched_at, nonce, worker, claimed_at, lease_expires_at, 0;

-- name: RemoteStreamHold
-- Adds ?6 bytes and the stream names in ?8 (a JSON array) to what the
-- claim has written, up to ?7 bytes and ?9 streams, while its task is not
-- finished; returns the step's attempt and position. No row: the claim
-- does not hold the step, or it is full (RemoteStreamFull says which).
UPDATE remote_steps
SET stream_bytes = stream_bytes + ?6,
    stream_names = (SELECT json_group_array(value) FROM (
        SELECT value FROM json_each(remote_steps.stream_names) UNION SELECT value FROM json_each(?8)))
WHERE task_id = ?1 AND position = ?2 AND namespace = ?3 AND nonce = ?4
  AND (json_array_length(?5) = 0 OR queue IN (SELECT value FROM json_each(?5)))
  AND stream_bytes + ?6 <= ?7
  AND (SELECT count(*) FROM (
        SELECT value FROM json_each(remote_steps.stream_names) UNION SELECT value FROM json_each(?8))) <= ?9
  AND EXISTS (SELECT 1 FROM tasks AS t WHERE t.id = remote_steps.task_id AND t.status IN ('pending', 'retrying', 'running'))
RETURNING attempt, position;

-- name: RemoteStreamFull
SELECT count(*) FROM remote_steps AS r
WHERE r.task_id = ?1 AND r.position = ?2 AND r.namespace = ?3 AND r.nonce = ?4
  AND (r.stream_bytes + ?5 > ?6 OR (SELECT count(*) FROM (
        SELECT value FROM json_each(r.stream_names) UNION SELECT value FROM json_each(?7))) > ?8)
  AND EXISTS (SELECT 1 FROM tasks AS t WHERE t.id = r.task_id AND t.status IN ('pending', 'retrying', 'running'));

-- name: RemoteStreamLastSeq
SELECT coalesce(max(seq), 0) FROM stream_entries WHERE task_id = ?1;

-- name: RemoteStreamOpen
-- The streams the step at ?3 left open (their attempt's last entry a
-- chunk), with their attempt, in the order they were first written.
SELECT f.stream, f.attempt FROM stream_entries AS f
WHERE f.task_id = ?1 AND f.namespace = ?2 AND f.position = ?3
GROUP BY f.stream, f.attempt
HAVING (SELECT l.kind FROM stream_entries AS l
        WHERE l.task_id = ?1 AND l.stream = f.stream AND l.position = ?3 AND l.attempt = f.attempt
        ORDER BY l.seq DESC LIMIT 1) = 'chunk'
ORDER BY min(f.seq);

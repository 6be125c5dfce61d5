-- The statements of streams (stream_entries, kept beside the log: see
-- migrations/sqlite/0020_streams.up.sql).

-- name: StreamFence
-- The last seq of a running task's streams under lease epoch ?3; no row
-- when the task is not running under it.
SELECT coalesce((SELECT max(seq) FROM stream_entries WHERE task_id = ?1), 0)
FROM tasks WHERE id = ?1 AND namespace = ?2 AND status = 'running' AND lease_epoch = ?3;

-- name: StreamInsert
-- ?1 task id, ?2 seq, ?3 namespace, ?4 stream, ?5 attempt, ?6 position,
-- ?7 kind, ?8 data, ?9 now (µs).
INSERT INTO stream_entries (task_id, seq, namespace, stream, attempt, position, kind, data, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9);

-- name: StreamRead
SELECT seq, stream, attempt, position, kind, data, created_at FROM stream_entries
WHERE task_id = ?1 AND namespace = ?2 AND seq > ?3 AND (NOT ?5 OR (position = ?6 AND attempt = ?7))
ORDER BY seq LIMIT ?4;

-- name: StreamOpenList
-- The chunks of attempts before ?3 that no end or rewind closed.
SELECT stream, attempt, position FROM stream_entries
WHERE task_id = ?1 AND namespace = ?2 AND attempt < ?3
GROUP BY stream, attempt, position
HAVING min(kind = 'chunk') = 1
ORDER BY attempt, position, stream;

-- name: StreamRemove
DELETE FROM stream_entries WHERE task_id = ?1 AND namespace = ?2;

-- name: StreamRemoveExpired
-- Up to ?3 of namespace ?1's entries written before ?2 (µs), oldest first.
DELETE FROM stream_entries WHERE rowid IN (
    SELECT rowid FROM stream_entries WHERE namespace = ?1 AND created_at < ?2 ORDER BY created_at LIMIT ?3);

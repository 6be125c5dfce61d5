-- Cron schedules (schedule.go). Same format as queries.sql.

-- name: ScheduleInsert
-- A name taken in the namespace inserts nothing.
INSERT INTO schedules (namespace, name, cron, timezone, task_type, type_version, queue, input,
    max_attempts, next_run_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, name) DO NOTHING;

-- name: ScheduleList
SELECT /* SCHEDULE_COLUMNS */ FROM schedules WHERE namespace = ? ORDER BY name;

-- name: ScheduleGet
SELECT /* SCHEDULE_COLUMNS */ FROM schedules WHERE namespace = ? AND name = ?;

-- name: ScheduleSetPaused
UPDATE schedules SET paused = ?, next_run_at = ?, retry_at = NULL, updated_at = ? WHERE namespace = ? AND name = ?;

-- name: ScheduleDelete
DELETE FROM schedules WHERE namespace = ? AND name = ?;

-- name: ScheduleListDue
-- The due schedules (schedules_due_idx) of a namespace ('' for every one),
-- earliest first; a skipped one is due again at its retry_at. The firer
-- lists them in its transaction, which holds the store's one writer.
SELECT /* SCHEDULE_COLUMNS */ FROM schedules WHERE NOT paused AND coalesce(retry_at, next_run_at) <= ?
    AND (? = '' OR namespace = ?)
ORDER BY coalesce(retry_at, next_run_at) LIMIT ?;

-- name: ScheduleFired
UPDATE schedules SET next_run_at = ?, last_tick = ?, retry_at = NULL, updated_at = ? WHERE namespace = ? AND name = ?;

-- name: ScheduleSkipped
-- A tick its queue refused: the schedule stays at the tick and is tried
-- again at retry_at.
UPDATE schedules SET next_run_at = ?, retry_at = ?, last_skipped_at = ?, last_skip_reason = ?, updated_at = ?
WHERE namespace = ? AND name = ?;

-- name: ScheduleNextDue
-- When the next active schedule of a namespace ('' for every one) is due.
SELECT min(coalesce(retry_at, next_run_at)) FROM schedules WHERE NOT paused AND (? = '' OR namespace = ?);

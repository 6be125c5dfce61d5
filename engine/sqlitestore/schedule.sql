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
UPDATE schedules SET paused = ?, next_run_at = ?, updated_at = ? WHERE namespace = ? AND name = ?;

-- name: ScheduleDelete
DELETE FROM schedules WHERE namespace = ? AND name = ?;

-- name: ScheduleListDue
-- The due schedules (schedules_due_idx), earliest first.
SELECT /* SCHEDULE_COLUMNS */ FROM schedules WHERE NOT paused AND next_run_at <= ? ORDER BY next_run_at LIMIT ?;

-- name: ScheduleFired
UPDATE schedules SET next_run_at = ?, last_tick = ?, updated_at = ? WHERE namespace = ? AND name = ?;

-- name: ScheduleNextDue
SELECT min(next_run_at) FROM schedules WHERE NOT paused;

-- Schedules whose tick a full queue refused: see the PostgreSQL twin.
ALTER TABLE schedules ADD COLUMN retry_at INTEGER;
ALTER TABLE schedules ADD COLUMN last_skipped_at INTEGER;
ALTER TABLE schedules ADD COLUMN last_skip_reason TEXT;

DROP INDEX schedules_due_idx;
CREATE INDEX schedules_due_idx
    ON schedules (coalesce(retry_at, next_run_at))
    WHERE NOT paused;

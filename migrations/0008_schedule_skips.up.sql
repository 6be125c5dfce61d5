-- Schedules whose tick a full queue refused.
--
-- A tick whose start a bounded queue refused (ErrQueueFull) is skipped for
-- the moment: next_run_at stays at the tick, and retry_at says when the
-- schedule is tried again (the queue's retry-after hint, or its next tick
-- if that comes first). A schedule is due at coalesce(retry_at,
-- next_run_at); firing clears retry_at. The last skip stays on the row for
-- operators (last_skipped_at, last_skip_reason).
ALTER TABLE /* TEMPLATE: schema */schedules
    ADD COLUMN retry_at         timestamptz,
    ADD COLUMN last_skipped_at  timestamptz,
    ADD COLUMN last_skip_reason text;

DROP INDEX /* TEMPLATE: schema */schedules_due_idx;
CREATE INDEX schedules_due_idx
    ON /* TEMPLATE: schema */schedules ((coalesce(retry_at, next_run_at)))
    WHERE NOT paused;

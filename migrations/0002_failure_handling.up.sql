-- Failure handling: a task's schedule-to-close deadline (from its
-- task_scheduled event), and an index for listing dead letters.
ALTER TABLE /* TEMPLATE: schema */tasks ADD COLUMN deadline timestamptz;

-- Dead letters wait for an operator: `cairn dlq list` and bulk retry walk
-- them newest first. Only dead-lettered rows are in the index.
CREATE INDEX tasks_dead_letter_idx
    ON /* TEMPLATE: schema */tasks (namespace, finished_at DESC, id)
    WHERE status = 'dead_lettered';

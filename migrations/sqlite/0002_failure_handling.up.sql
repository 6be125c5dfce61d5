-- A task's schedule-to-close deadline, and the dead letters' listing.
ALTER TABLE tasks ADD COLUMN deadline INTEGER;

CREATE INDEX tasks_dead_letter_idx
    ON tasks (namespace, finished_at DESC, id)
    WHERE status = 'dead_lettered';

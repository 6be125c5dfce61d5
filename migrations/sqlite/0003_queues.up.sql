-- Queue settings (bounded capacity, global concurrency limit), start
-- deadlines. SQLite cannot alter a CHECK constraint, so tasks.status is
-- checked by the store's code alone (it writes only replayed statuses).
CREATE TABLE queues (
    namespace   TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    max_waiting INTEGER CHECK (max_waiting > 0),
    concurrency INTEGER CHECK (concurrency > 0),
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE INDEX tasks_running_idx
    ON tasks (namespace, queue)
    WHERE status = 'running';

ALTER TABLE tasks ADD COLUMN start_deadline INTEGER;

CREATE INDEX tasks_start_deadline_idx
    ON tasks (start_deadline)
    WHERE status = 'pending' AND attempt = 0 AND start_deadline IS NOT NULL;

CREATE INDEX tasks_age_idx
    ON tasks (namespace, queue, type, type_version, run_at, id)
    WHERE status IN ('pending', 'retrying');

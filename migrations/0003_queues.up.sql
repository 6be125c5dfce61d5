-- Flow control. Queue settings: bounded capacity and a global concurrency
-- limit, per namespace and queue (a queue without a row has neither). A
-- task's start deadline, and the expired status of tasks not started by it.
CREATE TABLE /* TEMPLATE: schema */queues (
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    -- The most tasks that may wait (pending or retrying) in the queue; a
    -- start beyond it fails with ErrQueueFull. NULL: unbounded.
    max_waiting integer     CHECK (max_waiting > 0),
    -- The most tasks of the queue running at once, across all workers.
    -- NULL: unlimited.
    concurrency integer     CHECK (concurrency > 0),
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- Counts a queue's running tasks for its concurrency limit.
CREATE INDEX tasks_running_idx
    ON /* TEMPLATE: schema */tasks (namespace, queue)
    WHERE status = 'running';

ALTER TABLE /* TEMPLATE: schema */tasks ADD COLUMN start_deadline timestamptz;
ALTER TABLE /* TEMPLATE: schema */tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE /* TEMPLATE: schema */tasks ADD CONSTRAINT tasks_status_check CHECK (status IN
    ('pending', 'running', 'retrying', 'completed', 'failed', 'cancelled', 'dead_lettered', 'expired'));

-- Serves the sweep that expires tasks not started by their start deadline.
CREATE INDEX tasks_start_deadline_idx
    ON /* TEMPLATE: schema */tasks (start_deadline)
    WHERE status = 'pending' AND attempt = 0 AND start_deadline IS NOT NULL;

-- Serves the claim's aging share: due tasks by how long they have waited,
-- whatever their priority.
CREATE INDEX tasks_age_idx
    ON /* TEMPLATE: schema */tasks (namespace, queue, type, type_version, run_at, id)
    WHERE status IN ('pending', 'retrying');

-- Queue settings: bounded capacity and a global concurrency limit, per
-- namespace and queue. A queue without a row has neither.
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

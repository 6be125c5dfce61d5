-- Deploy-check findings (issue 36): in-flight tasks a worker's code cannot
-- replay, by the worker that found them, with where the code parts from
-- the history. A worker replaces its findings of a type when it starts;
-- the console and `cairn queue diagnose` list those of tasks not finished.
CREATE TABLE /* TEMPLATE: schema */stranded_tasks (
    namespace text        NOT NULL,
    type      text        NOT NULL,
    version   integer     NOT NULL CHECK (version > 0),
    worker_id text        NOT NULL,
    task_id   uuid        NOT NULL,
    kind      text        NOT NULL,
    position  integer     NOT NULL,
    recorded  text        NOT NULL,
    called    text        NOT NULL,
    error     text        NOT NULL,
    found_at  timestamptz NOT NULL,
    PRIMARY KEY (namespace, type, version, worker_id, task_id)
);
CREATE INDEX stranded_tasks_task ON /* TEMPLATE: schema */stranded_tasks (task_id);

-- Deploy-check findings: in-flight tasks a worker's code cannot replay.
CREATE TABLE stranded_tasks (
    namespace TEXT    NOT NULL,
    type      TEXT    NOT NULL,
    version   INTEGER NOT NULL CHECK (version > 0),
    worker_id TEXT    NOT NULL,
    task_id   TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    position  INTEGER NOT NULL,
    recorded  TEXT    NOT NULL,
    called    TEXT    NOT NULL,
    error     TEXT    NOT NULL,
    found_at  INTEGER NOT NULL,
    PRIMARY KEY (namespace, type, version, worker_id, task_id)
);
CREATE INDEX stranded_tasks_task ON stranded_tasks (task_id);

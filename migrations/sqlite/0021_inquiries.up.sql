-- Inquiries: a client's question for a worker that has a task's code (a
-- query; an update's validator), and the worker's answer. Times in µs.
CREATE TABLE inquiries (
    id           TEXT    PRIMARY KEY,
    namespace    TEXT    NOT NULL,
    task_id      TEXT    NOT NULL,
    task_type    TEXT    NOT NULL,
    task_version INTEGER NOT NULL CHECK (task_version > 0),
    kind         TEXT    NOT NULL CHECK (kind IN ('query', 'update')),
    name         TEXT    NOT NULL,
    args         BLOB,
    state        TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'answered')),
    answer       BLOB,
    error_code   TEXT    NOT NULL DEFAULT '',
    error        TEXT    NOT NULL DEFAULT '',
    taken_by     TEXT    NOT NULL DEFAULT '',
    taken_until  INTEGER,
    answered_by  TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    answered_at  INTEGER,
    deadline     INTEGER NOT NULL
);
CREATE INDEX inquiries_pending ON inquiries (namespace, task_type, task_version, created_at) WHERE state = 'pending';
CREATE INDEX inquiries_answered_at ON inquiries (answered_at) WHERE state = 'answered';
CREATE INDEX inquiries_deadline ON inquiries (deadline) WHERE state = 'pending';

-- Retention: as PostgreSQL's 0010_retention. Events may be deleted only for
-- a task listed in removing, which TaskRemoveFinished fills and empties in
-- the transaction that removes the task (SQLite has no transaction-local
-- setting for the trigger to read, as PostgreSQL's cairn.retention).
CREATE TABLE namespaces (
    name             TEXT    PRIMARY KEY,
    retention_ms     INTEGER CHECK (retention_ms > 0),
    key_retention_ms INTEGER CHECK (key_retention_ms > 0),
    updated_at       INTEGER NOT NULL
);

CREATE TABLE retired_keys (
    namespace       TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    task_id         TEXT    NOT NULL,
    task_type       TEXT    NOT NULL,
    input_sha256    BLOB    NOT NULL,
    removed_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    PRIMARY KEY (namespace, idempotency_key)
);

CREATE INDEX retired_keys_expires_idx ON retired_keys (expires_at);

CREATE INDEX tasks_finished_idx ON tasks (namespace, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE removing (task_id TEXT PRIMARY KEY) WITHOUT ROWID;

DROP TRIGGER events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM removing WHERE task_id = OLD.task_id)
BEGIN
    SELECT RAISE(ABORT, 'cairn: events are append-only (DELETE)');
END;

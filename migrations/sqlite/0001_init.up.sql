-- The embedded store's schema (engine/sqlitestore): the same tables as the
-- PostgreSQL migrations of the same number, in SQLite's types. Times are
-- INTEGER microseconds since the Unix epoch, UTC (PostgreSQL's precision);
-- ids are UUID text; JSON is TEXT. Each file here has a PostgreSQL twin of
-- the same name, and a test keeps the two lists equal.

-- The task projection: one row per task, always equal to the replay of its
-- events. Every append updates it in the same transaction.
CREATE TABLE tasks (
    id               TEXT    PRIMARY KEY,
    namespace        TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    type             TEXT    NOT NULL,
    type_version     INTEGER NOT NULL,
    status           TEXT    NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           INTEGER NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    lease_owner      TEXT,
    lease_epoch      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER,
    idempotency_key  TEXT,
    trace_id         TEXT,
    input            TEXT,
    output           TEXT,
    last_error       TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    last_seq         INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    labels           TEXT
) WITHOUT ROWID;

-- An idempotency key is unique per namespace.
CREATE UNIQUE INDEX tasks_idempotency_key_idx
    ON tasks (namespace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The claim's walk: due work by queue, type and version, then priority and
-- run time; only claimable rows.
CREATE INDEX tasks_claim_idx
    ON tasks (namespace, queue, type, type_version, priority DESC, run_at, id)
    WHERE status IN ('pending', 'retrying');

-- The rescuer: running tasks by lease expiry.
CREATE INDEX tasks_lease_idx
    ON tasks (lease_expires_at)
    WHERE status = 'running';

-- The event log: append-only, seq = 1..n per task.
CREATE TABLE events (
    task_id TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    type    TEXT    NOT NULL,
    at      INTEGER NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    data    TEXT    NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;

-- Events are facts: once written they are never changed or deleted.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'cairn: events are append-only (UPDATE)');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'cairn: events are append-only (DELETE)');
END;

-- Leader leases: a row per singleton role.
CREATE TABLE leaders (
    name       TEXT    PRIMARY KEY,
    owner      TEXT    NOT NULL,
    elected_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

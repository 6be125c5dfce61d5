-- Remote steps: as PostgreSQL's 0027_remote_steps. Times in µs.
CREATE TABLE remote_steps (
    task_id           TEXT    NOT NULL,
    position          INTEGER NOT NULL CHECK (position >= 0),
    namespace         TEXT    NOT NULL,
    name              TEXT    NOT NULL,
    queue             TEXT    NOT NULL,
    attempt           INTEGER NOT NULL CHECK (attempt > 0),
    input             BLOB,
    heartbeat_ms      INTEGER NOT NULL CHECK (heartbeat_ms > 0),
    start_to_close_ms INTEGER NOT NULL DEFAULT 0,
    dispatched_at     INTEGER NOT NULL,
    nonce             TEXT    NOT NULL DEFAULT '',
    worker            TEXT    NOT NULL DEFAULT '',
    claimed_at        INTEGER,
    lease_expires_at  INTEGER,
    PRIMARY KEY (task_id, position)
);
CREATE INDEX remote_steps_ready ON remote_steps (namespace, queue, dispatched_at) WHERE nonce = '';
CREATE INDEX remote_steps_lease ON remote_steps (lease_expires_at) WHERE nonce <> '';

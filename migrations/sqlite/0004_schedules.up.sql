-- Cron schedules, and per-type rate limits.
CREATE TABLE schedules (
    namespace    TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    cron         TEXT    NOT NULL,
    timezone     TEXT    NOT NULL,
    task_type    TEXT    NOT NULL,
    type_version INTEGER NOT NULL,
    queue        TEXT    NOT NULL,
    input        TEXT,
    max_attempts INTEGER NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0,
    next_run_at  INTEGER NOT NULL,
    last_tick    INTEGER,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE INDEX schedules_due_idx
    ON schedules (next_run_at)
    WHERE NOT paused;

CREATE TABLE rate_limits (
    namespace   TEXT    NOT NULL,
    task_type   TEXT    NOT NULL,
    max_starts  INTEGER NOT NULL CHECK (max_starts > 0),
    per_ms      INTEGER NOT NULL CHECK (per_ms > 0),
    tokens      REAL    NOT NULL,
    refilled_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, task_type)
);

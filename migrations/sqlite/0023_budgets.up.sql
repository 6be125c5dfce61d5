-- Budgets: as PostgreSQL's 0023_budgets (window starts in Unix seconds,
-- other times in µs). The store's one writer serializes reservations.
CREATE TABLE budgets (
    namespace       TEXT    NOT NULL,
    ref             TEXT    NOT NULL,
    usd             REAL    NOT NULL CHECK (usd >= 0),
    tokens          INTEGER NOT NULL CHECK (tokens >= 0),
    window_seconds  INTEGER NOT NULL CHECK (window_seconds > 0),
    on_exhausted    TEXT    NOT NULL CHECK (on_exhausted IN ('fail', 'wait')),
    wait_timeout_ms INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (namespace, ref)
);
CREATE TABLE budget_windows (
    namespace       TEXT    NOT NULL,
    ref             TEXT    NOT NULL,
    window_start    INTEGER NOT NULL,
    limit_usd       REAL    NOT NULL DEFAULT 0,
    limit_tokens    INTEGER NOT NULL DEFAULT 0,
    raised_usd      REAL    NOT NULL DEFAULT 0,
    raised_tokens   INTEGER NOT NULL DEFAULT 0,
    spent_usd       REAL    NOT NULL DEFAULT 0,
    spent_tokens    INTEGER NOT NULL DEFAULT 0,
    reserved_usd    REAL    NOT NULL DEFAULT 0,
    reserved_tokens INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (namespace, ref, window_start)
);
CREATE TABLE budget_reservations (
    task_id      TEXT    NOT NULL,
    attempt      INTEGER NOT NULL,
    position     INTEGER NOT NULL,
    namespace    TEXT    NOT NULL,
    ref          TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    usd          REAL    NOT NULL,
    tokens       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (task_id, attempt, position, ref, window_start)
);
CREATE TABLE budget_waits (
    namespace    TEXT    NOT NULL,
    ref          TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    task_id      TEXT    NOT NULL,
    PRIMARY KEY (namespace, ref, window_start, task_id)
);

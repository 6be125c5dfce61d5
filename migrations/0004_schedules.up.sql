-- Cron schedules, and per-type rate limits.
--
-- Cron schedules: the leader starts a task of a schedule's type at each of
-- its ticks. next_run_at is the next tick to fire; a schedule is fired at
-- most once per tick (the tick is part of the task's idempotency key).
CREATE TABLE /* TEMPLATE: schema */schedules (
    namespace    text        NOT NULL,
    name         text        NOT NULL,
    cron         text        NOT NULL,
    timezone     text        NOT NULL,
    task_type    text        NOT NULL,
    type_version integer     NOT NULL,
    queue        text        NOT NULL,
    input        jsonb,
    max_attempts integer     NOT NULL,
    paused       boolean     NOT NULL DEFAULT false,
    next_run_at  timestamptz NOT NULL,
    last_tick    timestamptz,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE INDEX schedules_due_idx
    ON /* TEMPLATE: schema */schedules (next_run_at)
    WHERE NOT paused;

-- Per-type rate limits: at most max_starts attempts of a task type start
-- per per_ms milliseconds, across all workers: a token bucket of that
-- capacity, refilled continuously, spent by claims (which lock the row).
CREATE TABLE /* TEMPLATE: schema */rate_limits (
    namespace   text             NOT NULL,
    task_type   text             NOT NULL,
    max_starts  integer          NOT NULL CHECK (max_starts > 0),
    per_ms      bigint           NOT NULL CHECK (per_ms > 0),
    tokens      double precision NOT NULL,
    refilled_at timestamptz      NOT NULL,
    PRIMARY KEY (namespace, task_type)
);

-- Budgets (issue 38): what tasks may spend on AI models, in tokens and US
-- dollars. budgets holds the scope budgets (a namespace's, a fairness
-- key's, a type's), each per fixed window aligned to the Unix epoch;
-- a task's own budget is in its task_scheduled. budget_windows counts,
-- per window of a budget (window_start in Unix seconds; 0 for a task
-- budget, which has one window), its limits, the raises, what was spent
-- and what open reservations hold; a reservation locks the windows it
-- takes (in ref, window order) and checks spent + reserved + ask <=
-- limit + raised. budget_reservations are the open reservations of
-- tasks' steps, by attempt and position: settled (removed) after the
-- step, or by the rescuer when the attempt's lease expires.
-- budget_waits are the tasks that wait on a window for a raise.
CREATE TABLE /* TEMPLATE: schema */budgets (
    namespace       text             NOT NULL,
    ref             text             NOT NULL,
    usd             double precision NOT NULL CHECK (usd >= 0),
    tokens          bigint           NOT NULL CHECK (tokens >= 0),
    window_seconds  bigint           NOT NULL CHECK (window_seconds > 0),
    on_exhausted    text             NOT NULL CHECK (on_exhausted IN ('fail', 'wait')),
    wait_timeout_ms bigint           NOT NULL DEFAULT 0,
    updated_at      timestamptz      NOT NULL,
    PRIMARY KEY (namespace, ref)
);
CREATE TABLE /* TEMPLATE: schema */budget_windows (
    namespace       text             NOT NULL,
    ref             text             NOT NULL,
    window_start    bigint           NOT NULL,
    limit_usd       double precision NOT NULL DEFAULT 0,
    limit_tokens    bigint           NOT NULL DEFAULT 0,
    raised_usd      double precision NOT NULL DEFAULT 0,
    raised_tokens   bigint           NOT NULL DEFAULT 0,
    spent_usd       double precision NOT NULL DEFAULT 0,
    spent_tokens    bigint           NOT NULL DEFAULT 0,
    reserved_usd    double precision NOT NULL DEFAULT 0,
    reserved_tokens bigint           NOT NULL DEFAULT 0,
    updated_at      timestamptz      NOT NULL,
    PRIMARY KEY (namespace, ref, window_start)
);
CREATE TABLE /* TEMPLATE: schema */budget_reservations (
    task_id      uuid             NOT NULL,
    attempt      integer          NOT NULL,
    position     integer          NOT NULL,
    namespace    text             NOT NULL,
    ref          text             NOT NULL,
    window_start bigint           NOT NULL,
    usd          double precision NOT NULL,
    tokens       bigint           NOT NULL,
    created_at   timestamptz      NOT NULL,
    PRIMARY KEY (task_id, attempt, position, ref, window_start)
);
CREATE TABLE /* TEMPLATE: schema */budget_waits (
    namespace    text   NOT NULL,
    ref          text   NOT NULL,
    window_start bigint NOT NULL,
    task_id      uuid   NOT NULL,
    PRIMARY KEY (namespace, ref, window_start, task_id)
);

-- Model rate limits (issue 38): tokens and requests per minute per model
-- (or provider key: the name a step's Spend.Model gives), per namespace,
-- shared by every worker on the database. A step that declares a Spend
-- naming a limited model is admitted when the tokens and requests
-- admitted in the last 60 seconds plus its ask fit; else it takes a
-- waiting ticket and waits its turn: round robin across fairness keys
-- (each ticket's round is one past its key's last, and never behind the
-- round last served), FIFO within a key. None of it is part of a task's
-- history; maintenance removes admissions once out of the window.
CREATE TABLE /* TEMPLATE: schema */model_limits (
    namespace           text        NOT NULL,
    model               text        NOT NULL,
    tokens_per_minute   bigint      NOT NULL CHECK (tokens_per_minute >= 0),
    requests_per_minute bigint      NOT NULL CHECK (requests_per_minute >= 0),
    -- served_round: the round of the ticket admitted last (fairness).
    served_round        bigint      NOT NULL DEFAULT 0,
    updated_at          timestamptz NOT NULL,
    PRIMARY KEY (namespace, model)
);
-- Admissions: what each admitted step reserved (state 'reserved') and,
-- once it ran, what it spent (state 'settled'), at the time it was let
-- through: the sliding window sums them.
CREATE TABLE /* TEMPLATE: schema */model_admissions (
    id           uuid        PRIMARY KEY,
    namespace    text        NOT NULL,
    model        text        NOT NULL,
    admitted_at  timestamptz NOT NULL,
    tokens       bigint      NOT NULL CHECK (tokens >= 0),
    reserved     bigint      NOT NULL CHECK (reserved >= 0),
    requests     integer     NOT NULL CHECK (requests >= 0),
    task_id      uuid        NOT NULL,
    position     integer     NOT NULL,
    fairness_key text        NOT NULL DEFAULT '',
    owner        text        NOT NULL,
    state        text        NOT NULL DEFAULT 'reserved' CHECK (state IN ('reserved', 'settled'))
);
CREATE INDEX model_admissions_window ON /* TEMPLATE: schema */model_admissions (namespace, model, admitted_at);
CREATE INDEX model_admissions_admitted_at ON /* TEMPLATE: schema */model_admissions (admitted_at);
-- Waiting tickets, in turn order (round, created_at, id); a ticket whose worker
-- stops refreshing it is gone at expires_at.
CREATE TABLE /* TEMPLATE: schema */model_tickets (
    id           uuid        PRIMARY KEY,
    namespace    text        NOT NULL,
    model        text        NOT NULL,
    fairness_key text        NOT NULL DEFAULT '',
    round        bigint      NOT NULL,
    tokens       bigint      NOT NULL CHECK (tokens >= 0),
    task_id      uuid        NOT NULL,
    position     integer     NOT NULL,
    owner        text        NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX model_tickets_turn ON /* TEMPLATE: schema */model_tickets (namespace, model, round, created_at, id);
CREATE INDEX model_tickets_key ON /* TEMPLATE: schema */model_tickets (namespace, model, fairness_key, round);

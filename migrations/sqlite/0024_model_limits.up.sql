-- Model rate limits: as PostgreSQL's 0024_model_limits. Times in µs.
CREATE TABLE model_limits (
    namespace           TEXT    NOT NULL,
    model               TEXT    NOT NULL,
    tokens_per_minute   INTEGER NOT NULL CHECK (tokens_per_minute >= 0),
    requests_per_minute INTEGER NOT NULL CHECK (requests_per_minute >= 0),
    served_round        INTEGER NOT NULL DEFAULT 0,
    updated_at          INTEGER NOT NULL,
    PRIMARY KEY (namespace, model)
);
CREATE TABLE model_admissions (
    id           TEXT    PRIMARY KEY,
    namespace    TEXT    NOT NULL,
    model        TEXT    NOT NULL,
    admitted_at  INTEGER NOT NULL,
    tokens       INTEGER NOT NULL CHECK (tokens >= 0),
    reserved     INTEGER NOT NULL CHECK (reserved >= 0),
    requests     INTEGER NOT NULL CHECK (requests >= 0),
    task_id      TEXT    NOT NULL,
    position     INTEGER NOT NULL,
    fairness_key TEXT    NOT NULL DEFAULT '',
    owner        TEXT    NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'reserved' CHECK (state IN ('reserved', 'settled'))
);
CREATE INDEX model_admissions_window ON model_admissions (namespace, model, admitted_at);
CREATE INDEX model_admissions_admitted_at ON model_admissions (admitted_at);
CREATE TABLE model_tickets (
    id           TEXT    PRIMARY KEY,
    namespace    TEXT    NOT NULL,
    model        TEXT    NOT NULL,
    fairness_key TEXT    NOT NULL DEFAULT '',
    round        INTEGER NOT NULL,
    tokens       INTEGER NOT NULL CHECK (tokens >= 0),
    task_id      TEXT    NOT NULL,
    position     INTEGER NOT NULL,
    owner        TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);
CREATE INDEX model_tickets_turn ON model_tickets (namespace, model, round, created_at, id);
CREATE INDEX model_tickets_key ON model_tickets (namespace, model, fairness_key, round);

-- Inquiries (issue 37): a client's question for a worker that has a
-- task's code (a query; an update's validator), and the worker's answer.
-- They are not part of any task's history: a worker that registers the
-- task's type and version takes a pending one (FOR UPDATE SKIP LOCKED,
-- held until taken_until), replays the task and answers; maintenance
-- removes those answered, or past their deadline, an hour on. Arguments
-- and answers are payloads as the SDK's codec stage encoded them (sealed
-- in an encrypted namespace), kept as bytes.
CREATE TABLE /* TEMPLATE: schema */inquiries (
    id           uuid        PRIMARY KEY,
    namespace    text        NOT NULL,
    task_id      uuid        NOT NULL,
    task_type    text        NOT NULL,
    task_version integer     NOT NULL CHECK (task_version > 0),
    kind         text        NOT NULL CHECK (kind IN ('query', 'update')),
    name         text        NOT NULL,
    args         bytea,
    state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'answered')),
    answer       bytea,
    error_code   text        NOT NULL DEFAULT '',
    error        text        NOT NULL DEFAULT '',
    taken_by     text        NOT NULL DEFAULT '',
    taken_until  timestamptz,
    answered_by  text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    answered_at  timestamptz,
    deadline     timestamptz NOT NULL
);
-- What a take reads: a namespace's pending inquiries, by type, oldest
-- first.
CREATE INDEX inquiries_pending ON /* TEMPLATE: schema */inquiries (namespace, task_type, task_version, created_at)
    WHERE state = 'pending';
-- What the removal reads.
CREATE INDEX inquiries_answered_at ON /* TEMPLATE: schema */inquiries (answered_at) WHERE state = 'answered';
CREATE INDEX inquiries_deadline ON /* TEMPLATE: schema */inquiries (deadline) WHERE state = 'pending';

-- Retention (issue 20). Finished tasks are removed whole, their logs with
-- them, by TaskRemoveFinished; the idempotency keys of removed tasks stay
-- taken for a while in retired_keys, so a late duplicate start is still
-- recognised as one.

-- A namespace's settings; a namespace without a row takes the defaults of
-- the process that runs retention.
CREATE TABLE /* TEMPLATE: schema */namespaces (
    name             text        PRIMARY KEY,
    -- Finished tasks are removed this long after they finished. NULL: the
    -- default.
    retention_ms     bigint      CHECK (retention_ms > 0),
    -- A removed task's idempotency key stays taken this long after the
    -- removal. NULL: the default.
    key_retention_ms bigint      CHECK (key_retention_ms > 0),
    updated_at       timestamptz NOT NULL
);
CREATE TABLE /* TEMPLATE: schema */retired_keys (
    namespace       text        NOT NULL,
    idempotency_key text        NOT NULL,
    task_id         uuid        NOT NULL,
    task_type       text        NOT NULL,
    -- SHA-256 of the removed task's input in canonical JSON form: what a
    -- start refusing its key's reuse compares (plan.KeyHolder), without
    -- keeping the input.
    input_sha256    bytea       NOT NULL,
    removed_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (namespace, idempotency_key)
);

CREATE INDEX retired_keys_expires_idx ON /* TEMPLATE: schema */retired_keys (expires_at);

-- A namespace's finished tasks, oldest first: what retention walks. Only
-- finished rows are in it, and a row enters it once, with its outcome.
CREATE INDEX tasks_finished_idx
    ON /* TEMPLATE: schema */tasks (namespace, finished_at)
    WHERE finished_at IS NOT NULL;

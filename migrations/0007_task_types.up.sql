-- The task types workers have registered, per namespace: what a producer
-- that is not a Go service (the HTTP API) may start, with the defaults the
-- workflow definition gives (queue, attempts, schedule-to-close). Workers
-- upsert their types when they start.
CREATE TABLE /* TEMPLATE: schema */task_types (
    namespace            text        NOT NULL,
    type                 text        NOT NULL,
    version              integer     NOT NULL CHECK (version > 0),
    queue                text        NOT NULL,
    max_attempts         integer     NOT NULL CHECK (max_attempts >= 0),
    schedule_to_close_ms bigint      CHECK (schedule_to_close_ms > 0),
    registered_by        text        NOT NULL,
    registered_at        timestamptz NOT NULL,
    PRIMARY KEY (namespace, type, version)
);

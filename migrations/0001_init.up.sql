-- The task projection: one row per task, always equal to the replay of its
-- events (see docs/architecture.md). Every append updates it in the same
-- transaction.
CREATE TABLE /* TEMPLATE: schema */tasks (
    id               uuid        PRIMARY KEY,
    namespace        text        NOT NULL,
    queue            text        NOT NULL,
    type             text        NOT NULL,
    type_version     integer     NOT NULL,
    status           text        NOT NULL,
    priority         integer     NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    lease_owner      text,
    lease_epoch      bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    idempotency_key  text,
    trace_id         text,
    input            jsonb,
    output           jsonb,
    last_error       jsonb,
    cancel_requested boolean     NOT NULL DEFAULT false,
    last_seq         bigint      NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    labels           jsonb,
    CONSTRAINT tasks_status_check CHECK (status IN
        ('pending', 'running', 'retrying', 'completed', 'failed', 'cancelled', 'dead_lettered'))
);

-- An idempotency key is unique per namespace.
CREATE UNIQUE INDEX tasks_idempotency_key_idx
    ON /* TEMPLATE: schema */tasks (namespace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Serves the claim query: due work by queue, type and version, then
-- priority and run time. Only claimable rows are in it, so it stays small as
-- finished tasks pile up, and a backlog of types a worker does not run (or
-- of other queues) costs its claims nothing.
CREATE INDEX tasks_claim_idx
    ON /* TEMPLATE: schema */tasks (namespace, queue, type, type_version, priority DESC, run_at, id)
    WHERE status IN ('pending', 'retrying');

-- Serves the rescuer: running tasks by lease expiry.
CREATE INDEX tasks_lease_idx
    ON /* TEMPLATE: schema */tasks (lease_expires_at)
    WHERE status = 'running';

-- Task listings need no index of their own: ids are UUIDv7, ordered by
-- creation time, so newest first is the primary key read backwards. Every
-- index here costs a write on every task update, as status changes keep
-- updates from being HOT.

-- The event log: append-only, seq = 1..n per task.
CREATE TABLE /* TEMPLATE: schema */events (
    task_id uuid        NOT NULL,
    seq     bigint      NOT NULL,
    type    text        NOT NULL,
    at      timestamptz NOT NULL,
    attempt integer     NOT NULL DEFAULT 0,
    data    jsonb       NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- Events are facts: once written they are never changed. Deleting is allowed
-- only to retention, which removes a finished task's whole log and says so by
-- setting cairn.retention for its transaction.
CREATE FUNCTION /* TEMPLATE: schema */events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('cairn.retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION 'cairn: events are append-only (TRUNCATE)' USING ERRCODE = 'restrict_violation';
    END IF;
    RAISE EXCEPTION 'cairn: events are append-only (% on task %, seq %)', TG_OP, OLD.task_id, OLD.seq
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE ON /* TEMPLATE: schema */events
    FOR EACH ROW EXECUTE FUNCTION /* TEMPLATE: schema */events_append_only();

CREATE TRIGGER events_no_truncate
    BEFORE TRUNCATE ON /* TEMPLATE: schema */events
    FOR EACH STATEMENT EXECUTE FUNCTION /* TEMPLATE: schema */events_append_only();

-- Leader leases: a row per singleton role (rescuer, and later cron and
-- retention), held by one process until it expires.
CREATE TABLE /* TEMPLATE: schema */leaders (
    name       text        PRIMARY KEY,
    owner      text        NOT NULL,
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

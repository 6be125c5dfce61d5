-- Remote steps (issue 40): steps a workflow hands to workers outside its
-- process, in any language, by queue (workflow.Remote). The task's
-- history records each dispatch and outcome; a row here is what a worker
-- claims, written in the transaction of the dispatch and removed in that
-- of the outcome. A claim sets nonce (which fences every later call of
-- that claim), worker and its lease; a lease that ends is the rescuer's,
-- which records the attempt failed. Inputs are payloads as the SDK's
-- codec stage encoded them, kept as bytes.
CREATE TABLE /* TEMPLATE: schema */remote_steps (
    task_id           uuid        NOT NULL,
    position          integer     NOT NULL CHECK (position >= 0),
    namespace         text        NOT NULL,
    name              text        NOT NULL,
    queue             text        NOT NULL,
    attempt           integer     NOT NULL CHECK (attempt > 0),
    input             bytea,
    heartbeat_ms      bigint      NOT NULL CHECK (heartbeat_ms > 0),
    start_to_close_ms bigint      NOT NULL DEFAULT 0,
    dispatched_at     timestamptz NOT NULL,
    nonce             text        NOT NULL DEFAULT '',
    worker            text        NOT NULL DEFAULT '',
    claimed_at        timestamptz,
    lease_expires_at  timestamptz,
    PRIMARY KEY (task_id, position)
);
-- What a claim reads: a queue's unclaimed steps, oldest dispatch first.
CREATE INDEX remote_steps_ready ON /* TEMPLATE: schema */remote_steps (namespace, queue, dispatched_at) WHERE nonce = '';
-- What the rescuer reads.
CREATE INDEX remote_steps_lease ON /* TEMPLATE: schema */remote_steps (lease_expires_at) WHERE nonce <> '';

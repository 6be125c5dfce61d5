-- Payloads by reference (issue 20): bytes a step keeps out of the history
-- (activities.PutBlob), one row per blob, owned by the task that wrote it
-- and removed with it by retention. The history holds a reference
-- (history.BlobRef: store "db", key, size, SHA-256).
CREATE TABLE /* TEMPLATE: schema */blobs (
    namespace    text        NOT NULL,
    key          text        NOT NULL,
    task_id      uuid        NOT NULL,
    content_type text,
    size         bigint      NOT NULL,
    sha256       bytea       NOT NULL,
    data         bytea       NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
);
-- Documents are mostly compressed already (PDF, images): store them out of
-- line without trying to compress them again.
ALTER TABLE /* TEMPLATE: schema */blobs ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX blobs_task_idx ON /* TEMPLATE: schema */blobs (task_id);

-- Payloads by reference: as PostgreSQL's 0013_blobs.
CREATE TABLE blobs (
    namespace    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    task_id      TEXT    NOT NULL,
    content_type TEXT,
    size         INTEGER NOT NULL,
    sha256       BLOB    NOT NULL,
    data         BLOB    NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX blobs_task_idx ON blobs (task_id);

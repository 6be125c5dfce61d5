-- Streams: as PostgreSQL's 0020_streams.
CREATE TABLE stream_entries (
    task_id    TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    namespace  TEXT    NOT NULL,
    stream     TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    position   INTEGER NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('chunk', 'rewind', 'end')),
    data       BLOB,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, seq)
);
CREATE INDEX stream_entries_created_idx ON stream_entries (namespace, created_at);

ALTER TABLE namespaces ADD COLUMN stream_ttl_ms INTEGER NOT NULL DEFAULT 0;

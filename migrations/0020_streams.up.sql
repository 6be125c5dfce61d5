-- Streams (issue 37): what a task's steps and workflow write while they
-- run (an LLM's tokens, progress), kept beside the log rather than in it.
-- seq orders a task's entries (1, 2, ...: a reader's cursor, an SSE
-- event id); attempt and position say which attempt of which step (-1:
-- the workflow body) wrote a chunk; a 'rewind' entry voids the chunks of
-- its attempt at its position and stream (the step failed, its next
-- attempt writes anew), an 'end' entry closes them (the step completed).
-- data is the chunk as the payload stage encoded it (sealed in an
-- encrypted namespace). Entries go with their task (retention, erasure)
-- and, in a namespace with a stream TTL, once older than it.
CREATE TABLE /* TEMPLATE: schema */stream_entries (
    task_id    uuid        NOT NULL,
    seq        bigint      NOT NULL,
    namespace  text        NOT NULL,
    stream     text        NOT NULL,
    attempt    integer     NOT NULL,
    position   integer     NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('chunk', 'rewind', 'end')),
    data       bytea,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (task_id, seq)
);
-- The TTL's removal, oldest first per namespace.
CREATE INDEX stream_entries_created_idx ON /* TEMPLATE: schema */stream_entries (namespace, created_at);

-- A namespace's stream TTL in milliseconds: 0 keeps entries as long as
-- their task.
ALTER TABLE /* TEMPLATE: schema */namespaces ADD COLUMN stream_ttl_ms bigint NOT NULL DEFAULT 0;

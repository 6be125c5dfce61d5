-- Time-range partitioning of the event log against batched deletes (issue 20):
-- psql "$URL" -A -f scripts/partition-experiment.sql (about 30 s; uses and
-- drops the schema partexp). Results and the decision: docs/notes/2026-12-02-partitioning.md
-- (linked from docs/internals/retention.md).
\timing on
DROP SCHEMA IF EXISTS partexp CASCADE;
CREATE SCHEMA partexp;
SET search_path = partexp;
-- The events table as cairn has it, and the same partitioned by task id
-- range (UUIDv7: an id range is a time range), four partitions.
CREATE TABLE events_flat (task_id uuid NOT NULL, seq bigint NOT NULL, type text NOT NULL, at timestamptz NOT NULL, attempt int NOT NULL, data jsonb NOT NULL, PRIMARY KEY (task_id, seq));
CREATE TABLE events_part (task_id uuid NOT NULL, seq bigint NOT NULL, type text NOT NULL, at timestamptz NOT NULL, attempt int NOT NULL, data jsonb NOT NULL, PRIMARY KEY (task_id, seq)) PARTITION BY RANGE (task_id);
CREATE TABLE events_p0 PARTITION OF events_part FOR VALUES FROM ('00000000-0000-0000-0000-000000000000') TO ('40000000-0000-0000-0000-000000000000');
CREATE TABLE events_p1 PARTITION OF events_part FOR VALUES FROM ('40000000-0000-0000-0000-000000000000') TO ('80000000-0000-0000-0000-000000000000');
CREATE TABLE events_p2 PARTITION OF events_part FOR VALUES FROM ('80000000-0000-0000-0000-000000000000') TO ('c0000000-0000-0000-0000-000000000000');
CREATE TABLE events_p3 PARTITION OF events_part FOR VALUES FROM ('c0000000-0000-0000-0000-000000000000') TO ('ffffffff-ffff-ffff-ffff-ffffffffffff');
-- 1,000,000 tasks × 4 events, ids spread over the range (as time-ordered
-- ids would fill it over four periods).
CREATE TABLE ids AS SELECT i, (lpad(to_hex((i::bigint * 4294)::bigint), 8, '0') || '-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid AS id FROM generate_series(0, 999999) AS i;
CREATE UNIQUE INDEX ON ids (i);
\echo insert flat
INSERT INTO events_flat SELECT id, s, 'step_completed', now(), 1, '{"v":1,"position":0,"name":"s1","output":null}' FROM ids, generate_series(1,4) s;
\echo insert partitioned
INSERT INTO events_part SELECT id, s, 'step_completed', now(), 1, '{"v":1,"position":0,"name":"s1","output":null}' FROM ids, generate_series(1,4) s;
ANALYZE ids; ANALYZE events_flat; ANALYZE events_part;
CHECKPOINT;
SELECT pg_size_pretty(pg_total_relation_size('events_flat')) AS flat, pg_size_pretty(pg_total_relation_size('events_p0')) AS p0;
\echo remove the oldest quarter (250,000 tasks, 1,000,000 events): batched deletes of 500 tasks, as retention does
SELECT pg_current_wal_lsn() AS lsn0 \gset
DO $$
DECLARE lo int := 0;
BEGIN
  WHILE lo < 250000 LOOP
    DELETE FROM partexp.events_flat WHERE task_id IN (SELECT id FROM partexp.ids WHERE i >= lo AND i < lo + 500);
    lo := lo + 500;
    COMMIT;
  END LOOP;
END $$;
SELECT pg_size_pretty(pg_current_wal_lsn() - :'lsn0') AS wal_batched_delete;
SELECT pg_size_pretty(pg_total_relation_size('events_flat')) AS flat_before_vacuum;
\echo vacuum after the deletes
VACUUM events_flat;
SELECT pg_size_pretty(pg_total_relation_size('events_flat')) AS flat_after_vacuum;
\echo drop the oldest partition instead
SELECT pg_current_wal_lsn() AS lsn1 \gset
DROP TABLE events_p0;
SELECT pg_size_pretty(pg_current_wal_lsn() - :'lsn1') AS wal_drop;
SELECT pg_size_pretty(sum(pg_total_relation_size(relid))) AS part_after_drop FROM pg_partition_tree('events_part');
\echo a history read (the claim's and History's access path): flat vs partitioned
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT * FROM events_flat WHERE task_id = (SELECT id FROM ids WHERE i = 700000) ORDER BY seq;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT * FROM events_part WHERE task_id = (SELECT id FROM ids WHERE i = 700000) ORDER BY seq;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT * FROM events_part WHERE task_id = ANY(ARRAY(SELECT id FROM ids WHERE i BETWEEN 700000 AND 700999)) ORDER BY task_id, seq;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT * FROM events_flat WHERE task_id = ANY(ARRAY(SELECT id FROM ids WHERE i BETWEEN 700000 AND 700999)) ORDER BY task_id, seq;
\echo the idempotency key: a unique index on a partitioned tasks table must include the partition key
CREATE TABLE tasks_part (id uuid NOT NULL, namespace text NOT NULL, idempotency_key text) PARTITION BY RANGE (id);
CREATE UNIQUE INDEX ON tasks_part (namespace, idempotency_key);
DROP SCHEMA partexp CASCADE;

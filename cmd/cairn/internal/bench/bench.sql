-- The statements `cairn bench` runs itself on PostgreSQL to reset its
-- schema and observe it; the engine's own statements stay in the engine,
-- and audit.sql holds those of the audit mode. Each "-- name:" line starts
-- a statement. /* TEMPLATE: schema */ becomes the quoted schema followed by
-- a dot, as in the migrations, and /* TEMPLATE: schema name */ the quoted
-- schema alone; values are bind parameters. Comment lines are dropped, so
-- they never reach the server.

-- name: ServerVersion
-- Reported with every result.
SHOW server_version;

-- name: SchemaContents
-- Whether the schema exists, how many of cairn's two essential tables it
-- has, and how many relations (tables, views, sequences) cairn did not
-- create: only a schema with both and none of the others is ever dropped.
SELECT
  EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = @schema),
  count(*) FILTER (WHERE c.relkind = 'r' AND c.relname IN ('tasks', 'schema_migrations')),
  count(*) FILTER (WHERE c.relname NOT IN ('tasks', 'events', 'leaders', 'queues', 'schedules', 'rate_limits', 'task_types',
                                           'namespaces', 'retired_keys', 'blobs', 'stranded_tasks', 'stream_entries', 'inquiries',
                                           'model_limits', 'model_admissions', 'model_tickets', 'budgets', 'budget_windows',
                                           'budget_reservations', 'budget_waits', 'remote_steps', 'schema_migrations'))
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = @schema AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f');

-- name: SchemaDrop
-- Drops the bench schema, once reset has made sure it is the bench's.
DROP SCHEMA /* TEMPLATE: schema name */ CASCADE;

-- name: TaskForeignExists
-- Whether the schema holds tasks the bench did not create (every bench
-- type name starts with "bench.").
SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks WHERE type NOT LIKE 'bench.%');

-- name: TablesAnalyze
-- Refreshes planner statistics after the bulk insert, so every drain
-- starts with the statistics of its backlog, whatever autovacuum managed to
-- do during the insert.
ANALYZE /* TEMPLATE: schema */tasks, /* TEMPLATE: schema */events;

-- name: TaskUnfinishedExists
-- The drain poll: is any task not terminal yet? Both halves match partial
-- indexes (tasks_claim_idx, tasks_lease_idx) and stop at the first entry,
-- so a poll costs little however many tasks remain; counting them on every
-- poll slowed a 2-core machine's drain by a fifth. It runs on a connection
-- that steers the planner to those indexes; see pollParams.
SELECT
   EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks WHERE status IN ('pending', 'retrying'))
OR EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks WHERE status = 'running');

-- name: TaskUnfinishedCount
-- Counts the tasks not terminal yet, for progress reports about once a
-- second.
SELECT
  (SELECT count(*) FROM /* TEMPLATE: schema */tasks WHERE status IN ('pending', 'retrying'))
+ (SELECT count(*) FROM /* TEMPLATE: schema */tasks WHERE status = 'running');

-- name: TaskClaimLatency
-- How many of @ids are not claimed yet, and, over those that are, the
-- claim time (started_at, the database's clock) less the start time
-- (created_at, the Start call's) in milliseconds: percentiles 50, 90 and
-- 99, and the most.
SELECT count(*) FILTER (WHERE started_at IS NULL),
  coalesce(percentile_disc(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at) * 1000)
    FILTER (WHERE started_at IS NOT NULL), ARRAY[0, 0, 0]::double precision[]),
  coalesce(max(extract(epoch FROM started_at - created_at) * 1000), 0)::double precision
FROM /* TEMPLATE: schema */tasks WHERE id = ANY(@ids::uuid[]);

-- name: DrainSummary
-- Read once after a drain. Prefilled tasks (see TaskPrefillFinished) are
-- not the drain's, nor are the four events of each still there (retention
-- may have removed some), which the caller subtracts.
SELECT
  count(*) FILTER (WHERE status = 'completed' AND type <> 'bench.prefill'),
  count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'dead_lettered') AND type <> 'bench.prefill'),
  max(finished_at) FILTER (WHERE type <> 'bench.prefill'),
  (SELECT count(*) FROM /* TEMPLATE: schema */events),
  count(*) FILTER (WHERE type = 'bench.prefill')
FROM /* TEMPLATE: schema */tasks;

-- name: TaskPrefillFinished
-- Inserts $1 tasks that finished a day ago, each with the four events a
-- one-step task leaves, so a drain can be measured with history piled up
-- in both tables. They are written directly, not through the engine: this
-- is ballast, not a workload. Their ids are UUIDv7 of a day ago, as the
-- engine would have made them (version 7 over gen_random_uuid's random
-- bits, the first 48 bits the milliseconds): random (v4) ids would sort
-- after every real task, and a newest-first listing (the worker's deploy
-- check) would walk the ballast before the tasks it looks for, which no
-- real history does.
WITH t AS (
    INSERT INTO /* TEMPLATE: schema */tasks (id, namespace, queue, type, type_version, status, priority, run_at,
        fair_at, attempt, max_attempts, lease_epoch, output, last_seq, created_at, updated_at, started_at, finished_at)
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            PLACING substring(int8send((extract(epoch FROM now() - interval '1 day') * 1000)::bigint + i) FROM 3)
            FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid,
        'default', 'default', 'bench.prefill', 1, 'completed', 0, now() - interval '1 day',
        now() - interval '1 day', 1, 1, 1, '1', 4, now() - interval '1 day', now() - interval '1 day',
        now() - interval '1 day', now() - interval '1 day'
    FROM generate_series(1, $1) AS i
    RETURNING id
)
INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
SELECT t.id, e.seq, e.type, now() - interval '1 day', e.attempt, e.data::jsonb FROM t CROSS JOIN (VALUES
    (1, 'task_scheduled', 0, '{"v":1,"namespace":"default","task_type":"bench.prefill","type_version":1,"queue":"default","priority":0,"run_at":"2026-01-01T00:00:00Z","max_attempts":1}'),
    (2, 'attempt_started', 1, '{"v":1,"worker_id":"prefill","lease_epoch":1,"lease_expires_at":"2026-01-01T00:00:00Z"}'),
    (3, 'step_completed', 1, '{"v":1,"position":0,"name":"noop","output":1}'),
    (4, 'task_completed', 1, '{"v":1,"output":1}')) AS e(seq, type, attempt, data);

-- name: TaskWaitingCount
-- The waiting mode's tasks that wait (pending, not due before their
-- receive's deadline), and those not finished: the worker has parked every
-- task when both are the same.
SELECT count(*) FILTER (WHERE status = 'pending' AND run_at > now() AND attempt > 0),
       count(*) FILTER (WHERE status IN ('pending', 'retrying', 'running'))
FROM /* TEMPLATE: schema */tasks;

-- name: TablesVacuum
-- What autovacuum does for a table that stops changing, done at once so
-- the idle window is measured in its steady state: visibility map set,
-- statistics of the waiting set.
VACUUM (ANALYZE) /* TEMPLATE: schema */tasks, /* TEMPLATE: schema */events;

-- name: StatReads
-- Cumulative reads of the bench schema's relations, from the statistics
-- PostgreSQL keeps: per table, the rows its sequential scans read and the
-- heap rows its index scans fetched; per index, the entries its scans
-- returned (what pg_stat_database.tup_returned sums; entries an index scan
-- skips by a condition on a later key column are not counted); and per
-- relation the buffers read (hit or not), which count every page a scan
-- walks.
SELECT 'table ' || t.relname, coalesce(t.seq_scan, 0), coalesce(t.seq_tup_read, 0), coalesce(t.idx_tup_fetch, 0),
    coalesce(io.heap_blks_hit, 0) + coalesce(io.heap_blks_read, 0)
FROM pg_catalog.pg_stat_user_tables AS t
JOIN pg_catalog.pg_statio_user_tables AS io ON io.relid = t.relid
WHERE t.schemaname = @schema
UNION ALL
SELECT 'index ' || i.indexrelname, coalesce(i.idx_scan, 0), coalesce(i.idx_tup_read, 0), 0::bigint,
    coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0)
FROM pg_catalog.pg_stat_user_indexes AS i
JOIN pg_catalog.pg_statio_user_indexes AS io ON io.indexrelid = i.indexrelid
WHERE i.schemaname = @schema;

-- name: StatDatabase
-- The database's own counters: committed transactions, rows returned
-- (sequential rows and index entries read) and fetched.
SELECT xact_commit, tup_returned, tup_fetched FROM pg_catalog.pg_stat_database WHERE datname = current_database();

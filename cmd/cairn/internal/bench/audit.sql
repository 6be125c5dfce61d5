-- The statements of `cairn bench audit`, in the format of bench.sql. The
-- histories are written by SQL in bulk (generate_series), not through the
-- engine: the mode measures reading them.

-- name: AuditFill
-- Writes tasks @first..@last (completed) and their histories:
-- task_scheduled, attempt_started, step_completed × 7 (or, for a failing
-- task, three steps, attempt_failed, attempt_started and four steps),
-- task_completed. Task i starts at @base + i × @task_spacing.
WITH src AS MATERIALIZED (
    SELECT i, gen_random_uuid() AS id, i % 5 = 0 AS failing,
        CASE WHEN i % 2 = 0 THEN 'bench.audit.extract' ELSE 'bench.audit.sync' END AS type,
        (ARRAY[429, 503, 500])[(i / 5) % 3 + 1] AS status,
        @base::timestamptz + i * @task_spacing::interval AS start
    FROM generate_series(@first::bigint, @last::bigint) AS i
), tpl(failing, seq, type, attempt, pos) AS (VALUES
    (false, 1, 'task_scheduled', 0, 0), (false, 2, 'attempt_started', 1, 0),
    (false, 3, 'step_completed', 1, 0), (false, 4, 'step_completed', 1, 1), (false, 5, 'step_completed', 1, 2),
    (false, 6, 'step_completed', 1, 3), (false, 7, 'step_completed', 1, 4), (false, 8, 'step_completed', 1, 5),
    (false, 9, 'step_completed', 1, 6), (false, 10, 'task_completed', 1, 0),
    (true, 1, 'task_scheduled', 0, 0), (true, 2, 'attempt_started', 1, 0),
    (true, 3, 'step_completed', 1, 0), (true, 4, 'step_completed', 1, 1), (true, 5, 'step_completed', 1, 2),
    (true, 6, 'attempt_failed', 1, 3), (true, 7, 'attempt_started', 2, 0),
    (true, 8, 'step_completed', 2, 3), (true, 9, 'step_completed', 2, 4), (true, 10, 'step_completed', 2, 5),
    (true, 11, 'step_completed', 2, 6), (true, 12, 'task_completed', 2, 0)
), ins AS (
    INSERT INTO /* TEMPLATE: schema */tasks (id, namespace, queue, type, type_version, status, priority, run_at,
        attempt, max_attempts, lease_epoch, input, output, last_seq, created_at, updated_at, started_at, finished_at, fair_at)
    SELECT id, @namespace, 'default', type, 1, 'completed', 0, start,
        CASE WHEN failing THEN 2 ELSE 1 END, 5, CASE WHEN failing THEN 2 ELSE 1 END,
        jsonb_build_object('document', i), jsonb_build_object('document', i, 'pages', i % 40),
        CASE WHEN failing THEN 12 ELSE 10 END, start, start, start, start + interval '0.5 s', start
    FROM src
)
INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
SELECT s.id, t.seq, t.type, s.start + t.seq * @event_spacing::interval, t.attempt, CASE t.type
    WHEN 'task_scheduled' THEN jsonb_build_object('v', 1, 'namespace', @namespace, 'task_type', s.type, 'type_version', 1,
        'queue', 'default', 'priority', 0, 'input', jsonb_build_object('document', s.i), 'run_at', s.start, 'max_attempts', 5)
    WHEN 'attempt_started' THEN jsonb_build_object('v', 1, 'worker_id', 'bench-worker-' || s.i % 8, 'lease_epoch', t.attempt,
        'lease_expires_at', s.start + interval '30 s')
    WHEN 'step_completed' THEN jsonb_build_object('v', 1, 'position', t.pos,
        'name', (ARRAY['fetch', 'ocr', 'classify', 'extract', 'validate', 'enrich', 'store'])[t.pos + 1],
        'output', jsonb_build_object('ms', s.i % 700, 'ok', true, 'pages', s.i % 40))
    WHEN 'attempt_failed' THEN jsonb_build_object('v', 1, 'error', jsonb_build_object('class', 'transient',
        'message', 'upstream answered HTTP ' || s.status, 'kind', 'http', 'status', s.status, 'step', 'extract',
        'position', 3, 'classified_by', 'default:step'), 'next_run_at', s.start + interval '1 s')
    ELSE jsonb_build_object('v', 1, 'output', jsonb_build_object('document', s.i, 'pages', s.i % 40))
END
FROM src AS s JOIN tpl AS t ON t.failing = s.failing
ORDER BY s.i, t.seq;

-- name: AuditSummarizeBRIN
-- Summarizes the BRIN ranges written since the last vacuum, as
-- autosummarize would soon after, so the first audit does not read the
-- unsummarized tail in full.
SELECT brin_summarize_new_values('/* TEMPLATE: schema */events_at_brin_idx'::regclass);

-- name: EventCount
-- Counts the events written.
SELECT count(*) FROM /* TEMPLATE: schema */events;

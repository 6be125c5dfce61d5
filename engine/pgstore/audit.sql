-- Audit queries over the event log (engine/audit.go). Same format as
-- queries.sql: a "-- name: X" line per statement, the schema marker, bind
-- parameters only.

-- name: EventScan
-- One page of a namespace's events in [@since, @until), ordered by (at,
-- task_id, seq), after the cursor when @paged, each with its task's row.
-- The time range is a plain pair of bounds so events_at_brin_idx serves it
-- (the caller folds the cursor's time into @since); the cursor and the
-- event types are checked on the rows the index lets through. Every event
-- of the range that passes is sorted before the page is cut, so a page
-- costs the events of its range: callers page through a wide range in
-- narrow windows.
SELECT e.task_id, e.seq, e.type, e.at, e.attempt, e.data,
    t.namespace, t.type, t.type_version, t.queue, t.status, t.trace_id, t.labels, t.fairness_key
FROM /* TEMPLATE: schema */events AS e
CROSS JOIN LATERAL (
    -- A primary-key lookup per event, memoized by task where the planner
    -- expects repeats. LIMIT 1 keeps this from being planned as a hash
    -- join, which reads every task of the namespace for each page (40 of
    -- a page's 60 ms with 100,000 tasks), and lets a wide range be sorted
    -- first and looked up only for the page.
    SELECT t.namespace, t.type, t.type_version, t.queue, t.status, t.trace_id, t.labels, t.fairness_key
    FROM /* TEMPLATE: schema */tasks AS t WHERE t.id = e.task_id LIMIT 1
) AS t
WHERE e.at >= @since AND e.at < @until
  AND t.namespace = @namespace
  AND (NOT @paged::boolean OR (e.at, e.task_id, e.seq) > (@after_at::timestamptz, @after_task_id::uuid, @after_seq::bigint))
  AND (cardinality(@event_types::text[]) = 0 OR e.type = ANY(@event_types::text[]))
  AND (@task_type::text = '' OR t.type = @task_type)
  AND (@queue::text = '' OR t.queue = @queue)
ORDER BY e.at, e.task_id, e.seq
LIMIT @max;

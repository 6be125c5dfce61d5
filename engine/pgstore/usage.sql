-- name: TaskUsageList
-- The tasks of @ids in @namespace, each with the events a usage roll-up
-- reads, in seq order: the usage reports of step_completed and
-- attempt_failed (only those that carry some; a fork's copies carry
-- none), the children of child_started and the next run of
-- task_continued. Found by the primary keys; a task none of whose events
-- is read has one row with a NULL seq.
SELECT t.id::text, t.type, coalesce(t.fairness_key, ''), t.status, e.seq, e.type,
    (e.data -> 'usage')::text, coalesce(e.data ->> 'child_id', e.data ->> 'next_task_id')
FROM /* TEMPLATE: schema */tasks AS t
LEFT JOIN /* TEMPLATE: schema */events AS e ON e.task_id = t.id AND (
    e.type IN ('child_started', 'task_continued')
    OR (e.type IN ('step_completed', 'attempt_failed') AND e.data ? 'usage'))
WHERE t.id = ANY(@ids::uuid[]) AND t.namespace = @namespace
ORDER BY t.id, e.seq;

-- name: UsageSeries
-- The usage reports of @namespace's step_completed and attempt_failed
-- events in [@from, @until) (found by time: the BRIN index on events.at),
-- summed by key (@by: the task's fairness key, the report's model or the
-- task's type) and bucket of @step_us microseconds from @from. Bounded
-- by the statement timeout SeriesBegin sets, as a diagnosis is.
SELECT CASE @by::text WHEN 'model' THEN coalesce(u ->> 'model', '') WHEN 'type' THEN t.type
        ELSE coalesce(t.fairness_key, '') END AS key,
    floor((extract(epoch FROM e.at) * 1000000 - @from_us::bigint) / @step_us::bigint)::int AS bucket,
    sum(greatest(0, coalesce((u ->> 'input_tokens')::bigint, 0)))::bigint,
    sum(greatest(0, coalesce((u ->> 'output_tokens')::bigint, 0)))::bigint,
    sum(greatest(0, coalesce((u ->> 'cost_usd')::float8, 0))),
    count(*)
FROM /* TEMPLATE: schema */events AS e
JOIN /* TEMPLATE: schema */tasks AS t ON t.id = e.task_id
CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(e.data -> 'usage') = 'array' THEN e.data -> 'usage' ELSE '[]'::jsonb END) AS u
WHERE e.at >= @from AND e.at < @until AND e.type IN ('step_completed', 'attempt_failed')
    AND t.namespace = @namespace
GROUP BY 1, 2;

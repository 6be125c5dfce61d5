-- name: TaskUsageList
-- ?1: a JSON array of task ids; ?2: their namespace. Each task with the
-- events a usage roll-up reads, in seq order, as PostgreSQL's
-- TaskUsageList: usage reports of step_completed and attempt_failed
-- (only those that carry some), children of child_started, the next run
-- of task_continued; a task with none has one row with a NULL seq.
SELECT t.id, t.type, coalesce(t.fairness_key, ''), t.status, e.seq, e.type,
    json_extract(e.data, '$.usage'), coalesce(json_extract(e.data, '$.child_id'), json_extract(e.data, '$.next_task_id'))
FROM tasks AS t
LEFT JOIN events AS e ON e.task_id = t.id AND (
    e.type IN ('child_started', 'task_continued')
    OR (e.type IN ('step_completed', 'attempt_failed') AND json_type(e.data, '$.usage') IS NOT NULL))
WHERE t.id IN (SELECT value FROM json_each(?1)) AND t.namespace = ?2
ORDER BY t.id, e.seq;

-- name: UsageSeries
-- The usage reports of namespace ?1's step_completed and attempt_failed
-- events in [?2, ?3) µs (found by events_at_idx), summed by key (?4:
-- fairness_key, model or type) and bucket of ?5 µs from ?2, as
-- PostgreSQL's UsageSeries.
SELECT CASE ?4 WHEN 'model' THEN coalesce(json_extract(u.value, '$.model'), '') WHEN 'type' THEN t.type
        ELSE coalesce(t.fairness_key, '') END AS key,
    (e.at - ?2) / ?5 AS bucket,
    sum(max(0, coalesce(json_extract(u.value, '$.input_tokens'), 0))),
    sum(max(0, coalesce(json_extract(u.value, '$.output_tokens'), 0))),
    total(max(0.0, coalesce(json_extract(u.value, '$.cost_usd'), 0.0))),
    count(*)
FROM events AS e
JOIN tasks AS t ON t.id = e.task_id
JOIN json_each(CASE WHEN json_type(e.data, '$.usage') = 'array' THEN json_extract(e.data, '$.usage') ELSE '[]' END) AS u
WHERE e.at >= ?2 AND e.at < ?3 AND e.type IN ('step_completed', 'attempt_failed') AND t.namespace = ?1
GROUP BY 1, 2;

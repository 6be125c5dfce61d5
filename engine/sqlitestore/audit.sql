-- Audit queries over the event log (EventScan). Same format as
-- queries.sql.

-- name: EventScan
-- One page of a namespace's events in [?1, ?2), by (at, task_id, seq),
-- after the cursor (?5, ?6, ?7) when ?4 (paged), each with its task's row.
-- events_at_idx serves the time range (the caller folds the cursor's time
-- into ?1); the other filters apply when set: ?8 a JSON array of event
-- types ('[]': all), ?9 the task type and ?10 the queue ('': all).
SELECT e.task_id, e.seq, e.type, e.at, e.attempt, e.data,
    t.namespace, t.type, t.type_version, t.queue, t.status, t.trace_id, t.labels, t.fairness_key
FROM events AS e JOIN tasks AS t ON t.id = e.task_id
WHERE e.at >= ?1 AND e.at < ?2 AND t.namespace = ?3
  AND (NOT ?4 OR (e.at, e.task_id, e.seq) > (?5, ?6, ?7))
  AND (json_array_length(?8) = 0 OR e.type IN (SELECT value FROM json_each(?8)))
  AND (?9 = '' OR t.type = ?9)
  AND (?10 = '' OR t.queue = ?10)
ORDER BY e.at, e.task_id, e.seq
LIMIT ?11;

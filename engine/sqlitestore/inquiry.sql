-- The statements of inquiries (store.InquiryCreate and the rest). Times
-- in µs, by the store's clock.

-- name: InquiryCreate
INSERT INTO inquiries (id, namespace, task_id, task_type, task_version, kind, name, args, created_at, deadline)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: InquiryTake
-- Holds up to ?5 pending inquiries of namespace ?1, of the kinds in ?2 (a
-- JSON array) and the types in ?3 (a JSON array of [type, version]), for
-- ?6 until ?7: those not past their deadline (?4, now) that no other take
-- holds, oldest first.
UPDATE inquiries SET taken_by = ?6, taken_until = ?7
WHERE id IN (
    SELECT i.id FROM inquiries AS i
    WHERE i.namespace = ?1 AND i.state = 'pending' AND i.kind IN (SELECT value FROM json_each(?2))
      AND EXISTS (SELECT 1 FROM json_each(?3) AS k
                  WHERE json_extract(k.value, '$[0]') = i.task_type AND json_extract(k.value, '$[1]') = i.task_version)
      AND i.deadline > ?4 AND (i.taken_until IS NULL OR i.taken_until <= ?4)
    ORDER BY i.created_at, i.id
    LIMIT ?5)
RETURNING id, namespace, task_id, task_type, task_version, kind, name, args, state, answer, error_code,
    error, taken_by, taken_until, answered_by, created_at, answered_at, deadline;

-- name: InquiryAnswer
UPDATE inquiries
SET state = 'answered', answer = ?3, error_code = ?4, error = ?5, answered_by = ?6, answered_at = ?7
WHERE id = ?1 AND namespace = ?2 AND state = 'pending';

-- name: InquiryGet
SELECT id, namespace, task_id, task_type, task_version, kind, name, args, state, answer, error_code,
    error, taken_by, taken_until, answered_by, created_at, answered_at, deadline
FROM inquiries WHERE id = ?1 AND namespace = ?2;

-- name: InquiryRemoveExpired
-- Removes up to ?2 inquiries answered before ?1, or pending with a
-- deadline before it.
DELETE FROM inquiries WHERE id IN (
    SELECT id FROM (SELECT id FROM inquiries WHERE state = 'answered' AND answered_at < ?1 ORDER BY answered_at LIMIT ?2)
    UNION ALL
    SELECT id FROM (SELECT id FROM inquiries WHERE state = 'pending' AND deadline < ?1 ORDER BY deadline LIMIT ?2)
    LIMIT ?2);

-- The statements of model rate limits (store.ModelLimitSet and the
-- rest), as PostgreSQL's modellimit.sql. Times in µs, by the store's
-- clock. ModelAdmit runs its statements in one write transaction.

-- name: ModelLimitCount
SELECT count(*), coalesce(sum(model = ?2), 0) FROM model_limits WHERE namespace = ?1;

-- name: ModelLimitSet
INSERT INTO model_limits (namespace, model, tokens_per_minute, requests_per_minute, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (namespace, model) DO UPDATE
SET tokens_per_minute = excluded.tokens_per_minute, requests_per_minute = excluded.requests_per_minute, updated_at = excluded.updated_at;

-- name: ModelLimitList
SELECT namespace, model, tokens_per_minute, requests_per_minute, updated_at
FROM model_limits WHERE namespace = ?1 ORDER BY model;

-- name: ModelLimitDelete
DELETE FROM model_limits WHERE namespace = ?1 AND model = ?2;

-- name: ModelLimitDeleteTickets
DELETE FROM model_tickets WHERE namespace = ?1 AND model = ?2;

-- name: ModelLimitGet
SELECT namespace, model, tokens_per_minute, requests_per_minute, updated_at, served_round
FROM model_limits WHERE namespace = ?1 AND model = ?2;

-- name: ModelTicketsExpire
DELETE FROM model_tickets WHERE namespace = ?1 AND model = ?2 AND expires_at <= ?3;

-- name: ModelWindowUse
-- The tokens and requests admitted in the window (?3, ?4].
SELECT coalesce(sum(tokens), 0), coalesce(sum(requests), 0)
FROM model_admissions WHERE namespace = ?1 AND model = ?2 AND admitted_at > ?3 AND admitted_at <= ?4;

-- name: ModelTicketTurn
SELECT
    (SELECT round FROM model_tickets WHERE id = ?3 AND namespace = ?1 AND model = ?2),
    (SELECT id FROM model_tickets WHERE namespace = ?1 AND model = ?2 ORDER BY round, created_at, id LIMIT 1),
    (SELECT max(round) FROM model_tickets WHERE namespace = ?1 AND model = ?2 AND fairness_key = ?4);

-- name: ModelAdmitInsert
INSERT INTO model_admissions (id, namespace, model, admitted_at, tokens, reserved, requests, task_id, position, fairness_key, owner)
VALUES (?1, ?2, ?3, ?4, ?5, ?5, 1, ?6, ?7, ?8, ?9);

-- name: ModelAdmitServed
DELETE FROM model_tickets WHERE id = ?1;

-- name: ModelServedRound
UPDATE model_limits SET served_round = max(served_round, ?3) WHERE namespace = ?1 AND model = ?2;

-- name: ModelTicketPut
INSERT INTO model_tickets (id, namespace, model, fairness_key, round, tokens, task_id, position, owner, created_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at, tokens = excluded.tokens;

-- name: ModelTicketAhead
SELECT count(*) FROM model_tickets AS t, model_tickets AS me
WHERE me.id = ?1 AND t.namespace = ?2 AND t.model = ?3
  AND (t.round < me.round OR (t.round = me.round AND (t.created_at < me.created_at OR (t.created_at = me.created_at AND t.id < me.id))));

-- name: ModelRetryAt
-- As PostgreSQL's: ?3 since, ?4 now, ?5 tpm, ?6 rpm, ?7 used tokens, ?8
-- used requests, ?9 the ask.
SELECT admitted_at FROM (
    SELECT admitted_at, sum(tokens) OVER w AS freed, sum(requests) OVER w AS freed_requests
    FROM model_admissions
    WHERE namespace = ?1 AND model = ?2 AND admitted_at > ?3 AND admitted_at <= ?4
    WINDOW w AS (ORDER BY admitted_at, id ROWS UNBOUNDED PRECEDING)
) AS x
WHERE (?5 = 0 OR ?7 - freed + ?9 <= ?5 OR ?7 - freed = 0)
  AND (?6 = 0 OR ?8 - freed_requests + 1 <= ?6)
ORDER BY admitted_at LIMIT 1;

-- name: ModelSettle
UPDATE model_admissions SET tokens = ?3, state = 'settled'
WHERE id = ?1 AND namespace = ?2 AND state = 'reserved'
RETURNING model, reserved;

-- name: ModelTicketDrop
DELETE FROM model_tickets WHERE id = ?1 AND namespace = ?2 RETURNING model;

-- name: ModelAdmissionRemoveOld
DELETE FROM model_admissions WHERE id IN (
    SELECT id FROM model_admissions WHERE admitted_at < ?1 ORDER BY admitted_at LIMIT ?2);

-- name: ModelTicketRemoveOld
DELETE FROM model_tickets WHERE id IN (SELECT id FROM model_tickets WHERE expires_at < ?1 LIMIT ?2);

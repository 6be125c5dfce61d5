-- The statements of model rate limits (store.ModelLimitSet and the
-- rest): limits per namespace and model, the admissions of the sliding
-- window, and the tickets of steps waiting their turn. Times are the
-- store's clock (@now). ModelAdmit runs its statements in one
-- transaction, the model's limit row locked first.

-- name: ModelLimitSet
-- Makes or replaces a limit, unless the namespace holds @max others
-- already; announces the model on the model channel (payload: namespace,
-- a newline, the model). Counts the limits written (0: too many).
WITH up AS (
    INSERT INTO /* TEMPLATE: schema */model_limits (namespace, model, tokens_per_minute, requests_per_minute, updated_at)
    SELECT @namespace, @model, @tpm, @rpm, @now
    WHERE EXISTS (SELECT 1 FROM /* TEMPLATE: schema */model_limits WHERE namespace = @namespace AND model = @model)
       OR (SELECT count(*) FROM /* TEMPLATE: schema */model_limits WHERE namespace = @namespace) < @max
    ON CONFLICT (namespace, model) DO UPDATE
    SET tokens_per_minute = excluded.tokens_per_minute, requests_per_minute = excluded.requests_per_minute, updated_at = excluded.updated_at
    RETURNING namespace, model
)
SELECT count(*) FROM (SELECT pg_notify(@channel, namespace || chr(10) || model) FROM up) AS n;

-- name: ModelLimitList
SELECT namespace, model, tokens_per_minute, requests_per_minute, updated_at
FROM /* TEMPLATE: schema */model_limits WHERE namespace = @namespace ORDER BY model;

-- name: ModelLimitDelete
-- Deletes a limit and its waiting tickets; announces the model. Counts
-- the limits deleted.
WITH gone AS (
    DELETE FROM /* TEMPLATE: schema */model_limits WHERE namespace = @namespace AND model = @model
    RETURNING namespace, model
), tickets AS (
    DELETE FROM /* TEMPLATE: schema */model_tickets WHERE namespace = @namespace AND model = @model
)
SELECT count(*) FROM (SELECT pg_notify(@channel, namespace || chr(10) || model) FROM gone) AS n;

-- name: ModelLimitLock
SELECT namespace, model, tokens_per_minute, requests_per_minute, updated_at, served_round
FROM /* TEMPLATE: schema */model_limits WHERE namespace = @namespace AND model = @model FOR UPDATE;

-- name: ModelTicketsExpire
DELETE FROM /* TEMPLATE: schema */model_tickets WHERE namespace = @namespace AND model = @model AND expires_at <= @now;

-- name: ModelWindowUse
-- The tokens and requests admitted in the window (@since, @until]:
-- @until is a window past now, so what a worker whose clock runs ahead
-- stamped (up to a window ahead) counts too.
SELECT coalesce(sum(tokens), 0)::bigint, coalesce(sum(requests), 0)::bigint
FROM /* TEMPLATE: schema */model_admissions
WHERE namespace = @namespace AND model = @model AND admitted_at > @since AND admitted_at <= @until;

-- name: ModelTicketTurn
-- The caller's ticket's round (if any), the id of the ticket first in
-- turn (if any), and the last round of the caller's key.
SELECT
    (SELECT round FROM /* TEMPLATE: schema */model_tickets WHERE id = @ticket AND namespace = @namespace AND model = @model),
    (SELECT id FROM /* TEMPLATE: schema */model_tickets WHERE namespace = @namespace AND model = @model
        ORDER BY round, created_at, id LIMIT 1),
    (SELECT max(round) FROM /* TEMPLATE: schema */model_tickets
        WHERE namespace = @namespace AND model = @model AND fairness_key = @fairness_key);

-- name: ModelAdmitInsert
-- Admits: the admission recorded, the caller's ticket gone, the served
-- round moved to the ticket's; announces the model (the next ticket is
-- first in turn).
WITH ins AS (
    INSERT INTO /* TEMPLATE: schema */model_admissions
        (id, namespace, model, admitted_at, tokens, reserved, requests, task_id, position, fairness_key, owner)
    VALUES (@ticket, @namespace, @model, @now, @tokens, @tokens, 1, @task_id, @position, @fairness_key, @owner)
    RETURNING namespace, model
), del AS (
    DELETE FROM /* TEMPLATE: schema */model_tickets WHERE id = @ticket
), served AS (
    UPDATE /* TEMPLATE: schema */model_limits SET served_round = greatest(served_round, @round)
    WHERE namespace = @namespace AND model = @model
)
SELECT pg_notify(@channel, namespace || chr(10) || model) FROM ins;

-- name: ModelTicketPut
-- Makes the caller's ticket, or renews its expiry.
INSERT INTO /* TEMPLATE: schema */model_tickets
    (id, namespace, model, fairness_key, round, tokens, task_id, position, owner, created_at, expires_at)
VALUES (@ticket, @namespace, @model, @fairness_key, @round, @tokens, @task_id, @position, @owner, @now, @expires_at)
ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at, tokens = excluded.tokens;

-- name: ModelTicketAhead
-- How many tickets are before the caller's in turn.
SELECT count(*) FROM /* TEMPLATE: schema */model_tickets AS t, /* TEMPLATE: schema */model_tickets AS me
WHERE me.id = @ticket AND t.namespace = @namespace AND t.model = @model
  AND (t.round, t.created_at, t.id) < (me.round, me.created_at, me.id);

-- name: ModelRetryAt
-- When enough of the window has slid out for an ask of @ask tokens (and
-- one request) to fit: the first admission, oldest first, at whose
-- exit (its time plus the window) the rest and the ask fit.
SELECT admitted_at FROM (
    SELECT admitted_at, sum(tokens) OVER w AS freed, sum(requests) OVER w AS freed_requests
    FROM /* TEMPLATE: schema */model_admissions
    WHERE namespace = @namespace AND model = @model AND admitted_at > @since AND admitted_at <= @until
    WINDOW w AS (ORDER BY admitted_at, id ROWS UNBOUNDED PRECEDING)
) AS x
WHERE (@tpm::bigint = 0 OR @used::bigint - freed + @ask::bigint <= @tpm::bigint OR @used::bigint - freed = 0)
  AND (@rpm::bigint = 0 OR @used_requests::bigint - freed_requests + 1 <= @rpm::bigint)
ORDER BY admitted_at LIMIT 1;

-- name: ModelSettle
-- Settles a reserved admission with what its step spent, and announces
-- the model when that frees tokens. Counts the admissions settled.
WITH up AS (
    UPDATE /* TEMPLATE: schema */model_admissions SET tokens = @tokens, state = 'settled'
    WHERE id = @id AND namespace = @namespace AND state = 'reserved'
    RETURNING namespace, model, reserved
), note AS (
    SELECT pg_notify(@channel, namespace || chr(10) || model) FROM up WHERE @tokens::bigint < up.reserved
)
SELECT (SELECT count(*) FROM up), (SELECT count(*) FROM note);

-- name: ModelTicketDrop
WITH gone AS (
    DELETE FROM /* TEMPLATE: schema */model_tickets WHERE id = @ticket AND namespace = @namespace
    RETURNING namespace, model
)
SELECT count(*) FROM (SELECT pg_notify(@channel, namespace || chr(10) || model) FROM gone) AS n;

-- name: ModelAdmissionRemoveOld
-- Removes up to @max admissions made before @before.
DELETE FROM /* TEMPLATE: schema */model_admissions WHERE id IN (
    SELECT id FROM /* TEMPLATE: schema */model_admissions WHERE admitted_at < @before ORDER BY admitted_at LIMIT @max);

-- name: ModelTicketRemoveOld
-- Removes up to @max tickets expired before @before.
DELETE FROM /* TEMPLATE: schema */model_tickets WHERE id IN (
    SELECT id FROM /* TEMPLATE: schema */model_tickets WHERE expires_at < @before LIMIT @max);

-- The statements of budgets (store.BudgetSet and the rest): scope
-- budgets' definitions, the windows counting what budgets spent and
-- hold, open reservations, tasks waiting for a raise. Window starts are
-- Unix seconds (0: a task budget's one window).

-- name: BudgetSet
-- Makes or replaces a budget, unless the namespace holds @max others
-- already. Counts the budgets written (0: too many).
WITH up AS (
    INSERT INTO /* TEMPLATE: schema */budgets (namespace, ref, usd, tokens, window_seconds, on_exhausted, wait_timeout_ms, updated_at)
    SELECT @namespace, @ref, @usd, @tokens, @window_seconds, @on_exhausted, @wait_timeout_ms, @now
    WHERE EXISTS (SELECT 1 FROM /* TEMPLATE: schema */budgets WHERE namespace = @namespace AND ref = @ref)
       OR (SELECT count(*) FROM /* TEMPLATE: schema */budgets WHERE namespace = @namespace) < @max
    ON CONFLICT (namespace, ref) DO UPDATE SET usd = excluded.usd, tokens = excluded.tokens, window_seconds = excluded.window_seconds,
        on_exhausted = excluded.on_exhausted, wait_timeout_ms = excluded.wait_timeout_ms, updated_at = excluded.updated_at
    RETURNING ref
)
SELECT count(*) FROM up;

-- name: BudgetList
SELECT ref, usd, tokens, window_seconds, on_exhausted, wait_timeout_ms, updated_at
FROM /* TEMPLATE: schema */budgets WHERE namespace = @namespace ORDER BY ref;

-- name: BudgetDelete
DELETE FROM /* TEMPLATE: schema */budgets WHERE namespace = @namespace AND ref = @ref;

-- name: BudgetWindowLock
-- Inserts the windows not written yet, sets the limits of all, and locks
-- them (the conflict's update takes each row's lock), in key order:
-- bytewise (COLLATE "C"), the order Go sorts keys in for the settles'
-- one-window-at-a-time updates, whatever the database's collation.
INSERT INTO /* TEMPLATE: schema */budget_windows AS w (namespace, ref, window_start, limit_usd, limit_tokens, updated_at)
SELECT @namespace, k.ref, k.start, k.usd, k.tokens, @now
FROM unnest(@refs::text[], @starts::bigint[], @usds::double precision[], @tokens::bigint[]) AS k(ref, start, usd, tokens)
ORDER BY k.ref COLLATE "C", k.start
ON CONFLICT (namespace, ref, window_start) DO UPDATE SET limit_usd = excluded.limit_usd, limit_tokens = excluded.limit_tokens
RETURNING w.ref, w.window_start, w.limit_usd, w.limit_tokens, w.raised_usd, w.raised_tokens, w.spent_usd, w.spent_tokens,
    w.reserved_usd, w.reserved_tokens, w.updated_at;

-- name: BudgetWindowList
SELECT w.ref, w.window_start, w.limit_usd, w.limit_tokens, w.raised_usd, w.raised_tokens, w.spent_usd, w.spent_tokens,
    w.reserved_usd, w.reserved_tokens, w.updated_at
FROM /* TEMPLATE: schema */budget_windows AS w
JOIN unnest(@refs::text[], @starts::bigint[]) AS k(ref, start) ON w.ref = k.ref AND w.window_start = k.start
WHERE w.namespace = @namespace
ORDER BY w.ref, w.window_start;

-- name: BudgetWindowAdd
-- Adds to the counts of the windows named (each once); returns those
-- found. A reserved count never goes below 0.
UPDATE /* TEMPLATE: schema */budget_windows AS w SET
    spent_usd = w.spent_usd + d.spent_usd, spent_tokens = w.spent_tokens + d.spent_tokens,
    reserved_usd = greatest(0, w.reserved_usd + d.reserved_usd), reserved_tokens = greatest(0, w.reserved_tokens + d.reserved_tokens),
    raised_usd = w.raised_usd + d.raised_usd, raised_tokens = w.raised_tokens + d.raised_tokens, updated_at = @now
FROM unnest(@refs::text[], @starts::bigint[], @spent_usd::double precision[], @spent_tokens::bigint[],
            @reserved_usd::double precision[], @reserved_tokens::bigint[], @raised_usd::double precision[], @raised_tokens::bigint[])
    AS d(ref, start, spent_usd, spent_tokens, reserved_usd, reserved_tokens, raised_usd, raised_tokens)
WHERE w.namespace = @namespace AND w.ref = d.ref AND w.window_start = d.start
RETURNING w.ref;

-- name: BudgetReservationInsert
-- Writes nothing when the step already holds a reservation in the
-- attempt: the caller reads 0 rows as a conflict.
INSERT INTO /* TEMPLATE: schema */budget_reservations (task_id, attempt, position, namespace, ref, window_start, usd, tokens, created_at)
SELECT @task_id, @attempt, @position, @namespace, k.ref, k.start, k.usd, k.tokens, @now
FROM unnest(@refs::text[], @starts::bigint[], @usds::double precision[], @tokens::bigint[]) AS k(ref, start, usd, tokens)
WHERE NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */budget_reservations
                  WHERE task_id = @task_id AND attempt = @attempt AND position = @position)
ON CONFLICT DO NOTHING;

-- name: BudgetReservationDelete
DELETE FROM /* TEMPLATE: schema */budget_reservations
WHERE task_id = @task_id AND attempt = @attempt AND position = @position
RETURNING ref, window_start, usd, tokens;

-- name: BudgetWaitInsert
INSERT INTO /* TEMPLATE: schema */budget_waits (namespace, ref, window_start, task_id)
VALUES (@namespace, @ref, @start, @task_id) ON CONFLICT DO NOTHING;

-- name: BudgetWaitTake
DELETE FROM /* TEMPLATE: schema */budget_waits
WHERE namespace = @namespace AND ref = @ref AND window_start = @start
RETURNING task_id;

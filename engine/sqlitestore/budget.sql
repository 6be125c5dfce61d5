-- The statements of budgets (store.BudgetSet and the rest), as
-- PostgreSQL's budget.sql; one window or entry a statement, run in one
-- transaction. Window starts in Unix seconds, other times in µs.

-- name: BudgetCount
SELECT count(*), coalesce(sum(ref = ?2), 0) FROM budgets WHERE namespace = ?1;

-- name: BudgetSet
INSERT INTO budgets (namespace, ref, usd, tokens, window_seconds, on_exhausted, wait_timeout_ms, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (namespace, ref) DO UPDATE SET usd = excluded.usd, tokens = excluded.tokens, window_seconds = excluded.window_seconds,
    on_exhausted = excluded.on_exhausted, wait_timeout_ms = excluded.wait_timeout_ms, updated_at = excluded.updated_at;

-- name: BudgetList
SELECT ref, usd, tokens, window_seconds, on_exhausted, wait_timeout_ms, updated_at
FROM budgets WHERE namespace = ?1 ORDER BY ref;

-- name: BudgetDelete
DELETE FROM budgets WHERE namespace = ?1 AND ref = ?2;

-- name: BudgetWindowLock
-- One window: inserted if not written yet, its limits set. The store's
-- one writer is the lock.
INSERT INTO budget_windows (namespace, ref, window_start, limit_usd, limit_tokens, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (namespace, ref, window_start) DO UPDATE SET limit_usd = excluded.limit_usd, limit_tokens = excluded.limit_tokens
RETURNING ref, window_start, limit_usd, limit_tokens, raised_usd, raised_tokens, spent_usd, spent_tokens,
    reserved_usd, reserved_tokens, updated_at;

-- name: BudgetWindowGet
SELECT ref, window_start, limit_usd, limit_tokens, raised_usd, raised_tokens, spent_usd, spent_tokens,
    reserved_usd, reserved_tokens, updated_at
FROM budget_windows WHERE namespace = ?1 AND ref = ?2 AND window_start = ?3;

-- name: BudgetWindowAdd
UPDATE budget_windows SET
    spent_usd = spent_usd + ?4, spent_tokens = spent_tokens + ?5,
    reserved_usd = max(0, reserved_usd + ?6), reserved_tokens = max(0, reserved_tokens + ?7),
    raised_usd = raised_usd + ?8, raised_tokens = raised_tokens + ?9, updated_at = ?10
WHERE namespace = ?1 AND ref = ?2 AND window_start = ?3;

-- name: BudgetReservationExists
SELECT count(*) FROM budget_reservations WHERE task_id = ?1 AND attempt = ?2 AND position = ?3;

-- name: BudgetReservationInsert
INSERT INTO budget_reservations (task_id, attempt, position, namespace, ref, window_start, usd, tokens, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING;

-- name: BudgetReservationDelete
DELETE FROM budget_reservations WHERE task_id = ?1 AND attempt = ?2 AND position = ?3
RETURNING ref, window_start, usd, tokens;

-- name: BudgetWaitInsert
INSERT INTO budget_waits (namespace, ref, window_start, task_id) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING;

-- name: BudgetWaitTake
DELETE FROM budget_waits WHERE namespace = ?1 AND ref = ?2 AND window_start = ?3 RETURNING task_id;

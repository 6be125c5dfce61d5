-- The claim and the append (claim.go): what a worker's hot path runs. Same
-- format as queries.sql, but plain "?" only, a value used twice passed
-- twice: modernc.org/sqlite allocates the name of every numbered parameter
-- each time it binds it.

-- name: ClaimQueueSlots
-- The free slots of the concurrency-limited queues among ? (a JSON array
-- of queue names).
SELECT q.name, q.concurrency - (SELECT count(*) FROM tasks AS t
    WHERE t.namespace = q.namespace AND t.queue = q.name AND t.status = 'running')
FROM queues AS q WHERE q.namespace = ? AND q.concurrency IS NOT NULL
    AND q.name IN (SELECT value FROM json_each(?));

-- name: ClaimRateLimits
-- The token buckets of the rate-limited types among ? (a JSON array of
-- type names).
SELECT task_type, max_starts, per_ms, tokens, refilled_at FROM rate_limits
WHERE namespace = ? AND task_type IN (SELECT value FROM json_each(?));

-- name: ClaimDueCount
-- How many tasks of one queue and type key are due, up to a limit: the due
-- range of tasks_age_idx, which ends where the work not yet due begins.
-- ClaimWalkByPriority takes no more: tasks_claim_idx orders the tasks not
-- yet due (waits for a signal or a child, timers, delayed starts) among
-- the due ones, and a walk that finds fewer than its limit would go on
-- through every one of them, at every claim of an idle worker.
SELECT count(*) FROM (SELECT 1 FROM tasks INDEXED BY tasks_age_idx
    WHERE namespace = ? AND queue = ? AND type = ? AND type_version = ?
      AND status IN ('pending', 'retrying') AND run_at <= ?
      /* EXCLUDE */
    ORDER BY run_at LIMIT ?);

-- name: ClaimWalkByPriority
-- Up to a limit of the tasks of one queue and type key due now (passed
-- twice), by priority and virtual start time: an ordered, limited walk of
-- tasks_claim_idx. /* EXCLUDE */ marks where the Excluding variant of each
-- claim statement leaves TaskClaimParams.Exclude (see excludeMarker). fair_at follows the task's columns. INDEXED BY: the
-- planner otherwise takes the run_at range of tasks_age_idx and sorts every
-- due task, a claim's cost growing with the backlog.
SELECT /* TASK_COLUMNS */, fair_at FROM tasks INDEXED BY tasks_claim_idx
WHERE namespace = ? AND queue = ? AND type = ? AND type_version = ?
  AND status IN ('pending', 'retrying') AND run_at <= ?
  AND (start_deadline IS NULL OR attempt > 0 OR start_deadline > ?)
  /* EXCLUDE */
ORDER BY priority DESC, fair_at, run_at, id
LIMIT ?;

-- name: ClaimWalkByAge
-- ClaimWalkByPriority by run time alone, the aging share's walk of
-- tasks_age_idx.
SELECT /* TASK_COLUMNS */, fair_at FROM tasks
WHERE namespace = ? AND queue = ? AND type = ? AND type_version = ?
  AND status IN ('pending', 'retrying') AND run_at <= ?
  AND (start_deadline IS NULL OR attempt > 0 OR start_deadline > ?)
  /* EXCLUDE */
ORDER BY run_at, id
LIMIT ?;

-- name: ClaimOutlook
-- What a claim that took fewer than it could left of one queue and type key
-- (namespace, queue, type, version and now, passed twice, then now again,
-- then, in its Excluding variant, the tasks excluded):
-- the next run time of its work not yet due (NULL: none), and whether due
-- work is still waiting. Read after the claim's own writes, so what it took
-- is no longer pending.
SELECT (SELECT run_at FROM tasks
        WHERE namespace = ? AND queue = ? AND type = ? AND type_version = ?
          AND status IN ('pending', 'retrying') AND run_at > ?
        -- The first entry of the range, not min() over it: min() read every
        -- task not yet due.
        ORDER BY run_at LIMIT 1),
    EXISTS (SELECT 1 FROM tasks
        WHERE namespace = ? AND queue = ? AND type = ? AND type_version = ?
          AND status IN ('pending', 'retrying') AND run_at <= ?
          AND (start_deadline IS NULL OR attempt > 0 OR start_deadline > ?)
          /* EXCLUDE */);

-- name: QueueLimited
-- Whether queue ? of namespace ? has a concurrency limit.
SELECT EXISTS (SELECT 1 FROM queues WHERE namespace = ? AND name = ? AND concurrency IS NOT NULL);

-- name: TaskWriteClaimed
-- A claimed task's row, written from the fold's next state under its new
-- lease, whose expiry is the eighth parameter. A keyed task keeps its
-- place among its key's tasks. The parameters are TaskWriteFenced's first
-- sixteen (rowArgs).
UPDATE tasks SET status = ?, run_at = ?,
    fair_at = CASE WHEN fairness_key IS NULL THEN ? ELSE max(?, fair_at) END,
    attempt = ?, lease_owner = ?, lease_epoch = ?, lease_expires_at = ?,
    output = ?, last_error = ?, cancel_requested = ?, last_seq = ?, updated_at = ?,
    started_at = ?, finished_at = ?
WHERE id = ?;

-- name: TaskWriteFenced
-- A task's row, written from the fold's next state if the fence lets the
-- append write: the task is at the seq the append expects, under its
-- epoch when that is not 0 (passed twice) and, for the rescuer, past its
-- lease now. The lease's expiry is kept while the lease goes on (the
-- eighth parameter is the new owner, again) and cleared when it ends. A
-- keyed task due again keeps its place among its key's tasks. The
-- history's bytes grow by the seventeenth parameter; the id is the
-- sixteenth, as in rowArgs, and the parameters after it follow from 18.
UPDATE tasks SET status = ?, run_at = ?,
    fair_at = CASE WHEN fairness_key IS NULL THEN ? ELSE max(?, fair_at) END,
    attempt = ?, lease_owner = ?, lease_epoch = ?,
    lease_expires_at = CASE WHEN ? IS NULL THEN NULL ELSE lease_expires_at END,
    output = ?, last_error = ?, cancel_requested = ?, last_seq = ?, updated_at = ?,
    started_at = ?, finished_at = ?, history_bytes = history_bytes + ?17
WHERE id = ?16 AND last_seq = ? AND (? = 0 OR lease_epoch = ?)
  AND (NOT ? OR lease_expires_at < ?)
  -- A signal's bound on the history's bytes (plan.HistoryBound); 0: none.
  AND (? = 0 OR history_bytes + ? <= ?);

-- name: TaskLeaseUnreadable
-- Leases a task whose history cannot be read, from its row alone.
UPDATE tasks SET status = 'running', attempt = attempt + 1, lease_owner = ?,
    lease_epoch = ?, lease_expires_at = ?, last_seq = last_seq + 1, updated_at = ?, started_at = coalesce(started_at, ?)
WHERE id = ?
RETURNING /* TASK_COLUMNS */;

-- name: RateLimitGet
SELECT max_starts, per_ms, tokens, refilled_at FROM rate_limits WHERE namespace = ? AND task_type = ?;

-- name: RateLimitSpend
UPDATE rate_limits SET tokens = ?, refilled_at = ? WHERE namespace = ? AND task_type = ?;

-- name: EventInsert
INSERT INTO events (task_id, seq, type, at, attempt, data) VALUES (?, ?, ?, ?, ?, ?);

-- name: TaskFenceByID
-- What an append's fence is checked against, to say why it refused.
SELECT last_seq, lease_epoch, lease_owner, lease_expires_at, history_bytes FROM tasks WHERE id = ?;

-- name: LeaseExtend
-- Extends a running task's lease if it is still under the epoch given.
UPDATE tasks SET lease_expires_at = ? WHERE id = ? AND lease_epoch = ? AND status = 'running'
RETURNING cancel_requested;

-- Every SQL statement the engine runs, one place per query. Each starts with
-- a "-- name: X" line; "/* TEMPLATE: schema */" becomes the configured schema
-- when the store is created. Values are always bind parameters.

-- name: TaskInsertMany
-- Inserts many tasks, each as its projection row plus task_scheduled, in one
-- statement, and notifies workers on commit, once per queue. A task whose
-- idempotency key is already taken in its namespace (also by an earlier task
-- of the same batch) is not inserted and its id is not returned. With
-- @unbounded_only, a batch writing to a bounded queue inserts nothing and
-- returns one NULL id instead: the caller then starts it again in a
-- transaction that checks the queue's capacity under its lock (an unbounded
-- start, the common one, so takes one round trip, not two).
WITH input AS (
    SELECT * FROM unnest(
        @ids::uuid[], @namespaces::text[], @queues::text[], @types::text[], @type_versions::integer[],
        @priorities::integer[], @run_ats::timestamptz[], @max_attempts::integer[],
        @idempotency_keys::text[], @trace_ids::text[], @inputs::jsonb[], @labels::jsonb[], @deadlines::timestamptz[],
        @start_deadlines::timestamptz[], @fairness_keys::text[], @fairness_weights::integer[], @datas::jsonb[],
        @parent_ids::uuid[], @parent_positions::integer[], @data_keys::bytea[])
        WITH ORDINALITY AS i(id, namespace, queue, type, type_version, priority, run_at, max_attempts,
                             idempotency_key, trace_id, input, labels, deadline, start_deadline,
                             fairness_key, fairness_weight, data, parent_id, parent_position, data_key, ord)
), placed AS (
    -- A task's virtual start time (fair_at): its run time without a
    -- fairness key; with one, a quantum (over its weight) after the last
    -- waiting task of its key, counting those before it in this batch.
    SELECT i.*, CASE WHEN i.fairness_key IS NULL THEN i.run_at ELSE greatest(
            i.run_at + (i.lane_pos - 1) * i.step,
            (SELECT max(t.fair_at) FROM /* TEMPLATE: schema */tasks AS t
             WHERE t.namespace = i.namespace AND t.queue = i.queue AND t.fairness_key = i.fairness_key
               AND t.status IN ('pending', 'retrying')) + i.lane_pos * i.step)
        END AS fair_at
    FROM (
        SELECT input.*,
            row_number() OVER (PARTITION BY namespace, queue, fairness_key ORDER BY ord) AS lane_pos,
            make_interval(secs => @fairness_quantum::double precision / coalesce(fairness_weight, 1)) AS step
        FROM input
    ) AS i
), bounded AS (
    SELECT @unbounded_only::boolean AND EXISTS (
        SELECT 1 FROM /* TEMPLATE: schema */queues AS q
        WHERE (q.namespace, q.name) IN (SELECT namespace, queue FROM input) AND q.max_waiting IS NOT NULL
    ) AS refused
), ins AS (
    INSERT INTO /* TEMPLATE: schema */tasks (
        id, namespace, queue, type, type_version, status, priority, run_at,
        attempt, max_attempts, idempotency_key, trace_id, input, labels, deadline, start_deadline,
        fairness_key, fairness_weight, fair_at, parent_id, parent_position, last_seq, created_at, updated_at, data_key)
    SELECT id, namespace, queue, type, type_version, 'pending', priority, run_at,
        0, max_attempts, idempotency_key, trace_id, input, labels, deadline, start_deadline,
        fairness_key, fairness_weight, fair_at, parent_id, parent_position, 1, @at, @at, data_key
    FROM placed WHERE NOT (SELECT refused FROM bounded)
      -- A key retention retired is still taken (the caller finds the
      -- removed task as the key's holder).
      AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */retired_keys AS r
                      WHERE r.namespace = placed.namespace AND r.idempotency_key = placed.idempotency_key
                        AND r.expires_at > @at)
    ORDER BY ord
    ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue
), ev AS (
    -- A large input is sent once, as the row's, and left out of @datas
    -- (pgstore.scheduledData): it is put back here.
    INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
    SELECT i.id, 1, 'task_scheduled', @at, 0,
        CASE WHEN i.input IS NULL OR i.data ? 'input' THEN i.data ELSE i.data || jsonb_build_object('input', i.input) END
    FROM input AS i WHERE i.id IN (SELECT id FROM ins)
), ready AS (
    SELECT pg_notify(@channel, queue) FROM (SELECT DISTINCT queue FROM ins) AS q
)
-- The notifications run only if the statement reads them: a LEFT JOIN to
-- them would be optimized away, a condition is evaluated once.
SELECT ins.id FROM ins WHERE (SELECT count(*) FROM ready) >= 0
UNION ALL
SELECT NULL FROM bounded WHERE refused;

-- name: TaskInsertOne
-- TaskInsertMany for a batch of one (a Start): the same rows, the same
-- answers, as a plain statement of scalars. The batch statement's array
-- decoding, ordering and per-key ranking cost a lone start more (0.3 ms on
-- a 2-core machine) than its writes do.
WITH bounded AS (
    SELECT @unbounded_only::boolean AND EXISTS (
        SELECT 1 FROM /* TEMPLATE: schema */queues AS q
        WHERE q.namespace = @namespace AND q.name = @queue AND q.max_waiting IS NOT NULL
    ) AS refused
), ins AS (
    INSERT INTO /* TEMPLATE: schema */tasks (
        id, namespace, queue, type, type_version, status, priority, run_at,
        attempt, max_attempts, idempotency_key, trace_id, input, labels, deadline, start_deadline,
        fairness_key, fairness_weight, fair_at, parent_id, parent_position, last_seq, created_at, updated_at, data_key)
    SELECT @id::uuid, @namespace::text, @queue::text, @type::text, @type_version::integer, 'pending',
        @priority::integer, @run_at::timestamptz, 0, @max_attempts::integer, @idempotency_key::text,
        @trace_id::text, @input::jsonb, @labels::jsonb, @deadline::timestamptz, @start_deadline::timestamptz,
        @fairness_key::text, @fairness_weight::integer,
        -- fair_at as TaskInsertMany places the first of its key in a batch.
        CASE WHEN @fairness_key::text IS NULL THEN @run_at::timestamptz ELSE greatest(@run_at::timestamptz,
            (SELECT max(t.fair_at) FROM /* TEMPLATE: schema */tasks AS t
             WHERE t.namespace = @namespace AND t.queue = @queue AND t.fairness_key = @fairness_key::text
               AND t.status IN ('pending', 'retrying'))
            + make_interval(secs => @fairness_quantum::double precision / coalesce(@fairness_weight::integer, 1)))
        END,
        @parent_id::uuid, @parent_position::integer, 1, @at, @at, @data_key::bytea
    WHERE NOT (SELECT refused FROM bounded)
      AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */retired_keys AS r
                      WHERE r.namespace = @namespace AND r.idempotency_key = @idempotency_key::text
                        AND r.expires_at > @at)
    ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue, input
), ev AS (
    INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
    SELECT ins.id, 1, 'task_scheduled', @at, 0,
        CASE WHEN ins.input IS NULL OR @data::jsonb ? 'input' THEN @data::jsonb
             ELSE @data::jsonb || jsonb_build_object('input', ins.input) END
    FROM ins
), ready AS (
    SELECT pg_notify(@channel, queue) FROM ins
)
SELECT ins.id FROM ins WHERE (SELECT count(*) FROM ready) >= 0
UNION ALL
SELECT NULL FROM bounded WHERE refused;

-- name: RetiredKeysRecheck
-- After a keyed insert, in its transaction: refuses the start (CRN01) if a
-- key it took was retired by a removal its insert did not see.
SELECT /* TEMPLATE: schema */refuse_retired_keys(@ids::uuid[], @at::timestamptz);

-- name: TaskIDByIdempotencyKey
-- What holds a key, with what a RefuseKeyReuse start compares (see
-- plan.KeyHolder): a task, or else a task retention removed whose key is
-- still retired at @at, the start's time (the clock the insert statements
-- judged the key by); and whose child a task is, for a child start.
(SELECT id, type, input, NULL::bytea AS input_sha256, false AS removed, parent_id, parent_position
 FROM /* TEMPLATE: schema */tasks
 WHERE namespace = @namespace AND idempotency_key = @idempotency_key)
UNION ALL
(SELECT task_id, task_type, NULL, input_sha256, true, NULL::uuid, NULL::integer FROM /* TEMPLATE: schema */retired_keys
 WHERE namespace = @namespace AND idempotency_key = @idempotency_key AND expires_at > @at)
LIMIT 1;

-- name: TaskClaimMany
-- Claims up to @max due tasks of the given queues and type keys in one round
-- trip: locks them with SKIP LOCKED so concurrent claimers never block each
-- other, starts a new attempt under a new lease epoch, appends
-- attempt_started (the versioned encoding of history.AttemptStartedData),
-- and returns each task's row with its earlier events. The statement's
-- snapshot does not see the attempt_started it inserts; the caller rebuilds
-- that event from the returned row. Every row starts with the claim's
-- outlook (next_at, held_back; see outlook below), and a claim that took
-- nothing returns one row of the outlook alone (its task columns NULL).
WITH caps AS (
    -- Free slots of the queues with a concurrency limit (their rows were
    -- locked by ClaimLocks earlier in this transaction, so this
    -- count sees every claim committed before ours).
    SELECT q.name AS queue, greatest(0, q.concurrency - (
        SELECT count(*) FROM /* TEMPLATE: schema */tasks AS t
        WHERE t.namespace = q.namespace AND t.queue = q.name AND t.status = 'running'))::integer AS free
    FROM /* TEMPLATE: schema */queues AS q
    WHERE q.namespace = @namespace AND q.name = ANY(@queues::text[]) AND q.concurrency IS NOT NULL
), rates AS (
    -- Starts left in the token bucket of each rate-limited type (rows
    -- locked by ClaimLocks earlier in this transaction).
    -- The clock is read now, not at the transaction's start (now()): a
    -- claim that began before another but locked the row after it would
    -- otherwise see time run backwards since that one's refill.
    SELECT r.task_type, r.per_ms, r.max_starts, b.tokens, greatest(0, floor(b.tokens))::integer AS free
    FROM /* TEMPLATE: schema */rate_limits AS r
    CROSS JOIN LATERAL (SELECT least(r.max_starts::double precision,
        r.tokens + greatest(0, extract(epoch FROM clock_timestamp() - r.refilled_at)) * 1000 / r.per_ms * r.max_starts) AS tokens) AS b
    WHERE r.namespace = @namespace AND r.task_type = ANY(@types::text[])
), walked AS (
    -- One ordered index walk per queue and type key (tasks_claim_idx), so
    -- the cost stays flat however large the backlog; a limited queue's walk
    -- takes no more than its free slots. Rows locked beyond what is
    -- claimed are unlocked at commit.
    SELECT c.id, c.priority, c.fair_at, c.run_at, q.queue, caps.free, k.type, rates.free AS rfree
    FROM unnest(@queues::text[]) AS q(queue)
    LEFT JOIN caps ON caps.queue = q.queue
    CROSS JOIN unnest(@types::text[], @versions::integer[]) AS k(type, version)
    LEFT JOIN rates ON rates.task_type = k.type
    CROSS JOIN LATERAL (
        -- How many of the key's tasks are due, up to @max: the due range
        -- of tasks_age_idx (ORDER BY run_at keeps the plan on it), which
        -- ends where the work not yet due begins. tasks_claim_idx orders
        -- tasks not yet due (waits for a signal or a child, timers,
        -- delayed starts) among the due ones, and its "due now" test only
        -- skips them: a walk that finds fewer than its limit would go on
        -- through every one of them, at every claim of an idle worker. No
        -- more than this many, it stops at the last due task instead.
        SELECT count(*)::integer AS n FROM (
            SELECT 1 FROM /* TEMPLATE: schema */tasks AS t
            WHERE t.namespace = @namespace AND t.queue = q.queue
              AND t.type = k.type AND t.type_version = k.version
              AND t.status IN ('pending', 'retrying') AND t.run_at <= now()
              /* EXCLUDE */
            ORDER BY t.run_at
            LIMIT @max
        ) AS d
    ) AS due
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.fair_at, t.run_at FROM /* TEMPLATE: schema */tasks AS t
        WHERE t.namespace = @namespace AND t.queue = q.queue
          AND t.type = k.type AND t.type_version = k.version
          AND t.status IN ('pending', 'retrying') AND t.run_at <= now()
          -- Never a first start past the start deadline: the sweep
          -- expires such a task instead.
          AND (t.start_deadline IS NULL OR t.attempt > 0 OR t.start_deadline > now())
          -- Tasks the worker cannot replay (TaskClaimParams.Exclude): see
          -- claimExcluding.
          /* EXCLUDE */
        -- By priority, then virtual start time: round robin across
        -- fairness keys, run time order for tasks without one.
        ORDER BY t.priority DESC, t.fair_at, t.run_at, t.id
        LIMIT least(@max, coalesce(caps.free, @max), coalesce(rates.free, @max), due.n)
        FOR UPDATE SKIP LOCKED
    ) AS c
), aged AS (
    -- Aging: @aging slots of the batch (one in eight on average) go to the
    -- longest-waiting due tasks whatever their priority, so a flood of
    -- high-priority work cannot starve the rest (tasks_age_idx).
    SELECT c.id, c.priority, c.fair_at, c.run_at, q.queue, caps.free, k.type, rates.free AS rfree
    FROM unnest(@queues::text[]) AS q(queue)
    LEFT JOIN caps ON caps.queue = q.queue
    CROSS JOIN unnest(@types::text[], @versions::integer[]) AS k(type, version)
    LEFT JOIN rates ON rates.task_type = k.type
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.fair_at, t.run_at FROM /* TEMPLATE: schema */tasks AS t
        WHERE t.namespace = @namespace AND t.queue = q.queue
          AND t.type = k.type AND t.type_version = k.version
          AND t.status IN ('pending', 'retrying') AND t.run_at <= now()
          AND (t.start_deadline IS NULL OR t.attempt > 0 OR t.start_deadline > now())
          /* EXCLUDE */
        ORDER BY t.run_at, t.id
        LIMIT least(@aging::integer, coalesce(caps.free, @aging::integer), coalesce(rates.free, @aging::integer))
        FOR UPDATE SKIP LOCKED
    ) AS c
), candidates AS (
    -- A task both walks found counts as aged if it is among the @aging
    -- oldest.
    SELECT DISTINCT ON (id) id, priority, fair_at, run_at, queue, free, type, rfree,
        coalesce(aged_rank <= @aging::integer, false) AS reserved
    FROM (
        SELECT id, priority, fair_at, run_at, queue, free, type, rfree, row_number() OVER (ORDER BY run_at, id) AS aged_rank FROM aged
        UNION ALL
        SELECT id, priority, fair_at, run_at, queue, free, type, rfree, NULL FROM walked
    ) AS u
    ORDER BY id, aged_rank NULLS LAST
), due AS (
    -- The reserved oldest first, then the best by priority, @max in all,
    -- and no more of a limited queue than it has free slots (its walks per
    -- type share them). Only candidates of a limited queue or type are
    -- ranked: every candidate of such a queue (type) has its free (rfree)
    -- set, so each rank that counts is taken over all it must count, and
    -- a claim of unlimited work sorts its candidates once, not three times.
    SELECT id FROM (
        SELECT id, priority, fair_at, run_at, reserved FROM candidates
        WHERE free IS NULL AND rfree IS NULL
        UNION ALL
        SELECT id, priority, fair_at, run_at, reserved FROM (
            SELECT id, priority, fair_at, run_at, free, rfree, reserved,
                row_number() OVER (PARTITION BY queue ORDER BY reserved DESC, priority DESC, fair_at, run_at, id) AS rank,
                row_number() OVER (PARTITION BY type ORDER BY reserved DESC, priority DESC, fair_at, run_at, id) AS type_rank
            FROM candidates
            WHERE free IS NOT NULL OR rfree IS NOT NULL
        ) AS r
        WHERE (free IS NULL OR rank <= free) AND (rfree IS NULL OR type_rank <= rfree)
    ) AS u
    ORDER BY reserved DESC, priority DESC, fair_at, run_at, id
    LIMIT @max
), claimed AS (
    UPDATE /* TEMPLATE: schema */tasks AS t SET
        status = 'running',
        attempt = t.attempt + 1,
        lease_owner = @owner,
        -- A new epoch, greater than the last and unique even across a
        -- database crash: a claim commits without waiting for disk, so a
        -- crash can lose one whose worker already runs the task; the next
        -- claim must not hand out the lost claim's epoch again, or the
        -- fence could not tell the two workers apart. The clock (in
        -- microseconds) has moved on since the lost claim.
        lease_epoch = greatest(t.lease_epoch + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
        lease_expires_at = now() + make_interval(secs => @lease_seconds),
        last_seq = t.last_seq + 1,
        updated_at = now(),
        started_at = coalesce(t.started_at, now())
    FROM due WHERE t.id = due.id
    RETURNING t.*
), ev AS (
    INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
    SELECT id, last_seq, 'attempt_started', updated_at, attempt,
        jsonb_build_object('v', 1, 'worker_id', lease_owner, 'lease_epoch', lease_epoch,
            'lease_expires_at', lease_expires_at)
    FROM claimed
), spent AS (
    -- Take the starts from the rate-limited types' buckets (refilled to
    -- now first). A data-modifying CTE runs whether or not it is read.
    UPDATE /* TEMPLATE: schema */rate_limits AS r SET
        tokens = least(r.max_starts::double precision,
            r.tokens + greatest(0, extract(epoch FROM clock_timestamp() - r.refilled_at)) * 1000 / r.per_ms * r.max_starts) - n.started,
        refilled_at = greatest(r.refilled_at, clock_timestamp())
    FROM (SELECT type, count(*) AS started FROM claimed GROUP BY type) AS n
    WHERE r.namespace = @namespace AND r.task_type = n.type
), left_due AS (
    -- Due tasks of the claim's queues and type keys that it did not take
    -- (read only by the outlook, through EXISTS: the first row found ends
    -- the walk).
    SELECT t.queue, t.type FROM unnest(@queues::text[]) AS q(queue)
    CROSS JOIN unnest(@types::text[], @versions::integer[]) AS k(type, version)
    CROSS JOIN LATERAL (
        SELECT t.queue, t.type FROM /* TEMPLATE: schema */tasks AS t
        WHERE t.namespace = @namespace AND t.queue = q.queue
          AND t.type = k.type AND t.type_version = k.version
          AND t.status IN ('pending', 'retrying') AND t.run_at <= now()
          AND (t.start_deadline IS NULL OR t.attempt > 0 OR t.start_deadline > now())
          AND t.id NOT IN (SELECT id FROM claimed)
          /* EXCLUDE */
        -- The due range of tasks_age_idx: never a walk past the tasks not
        -- yet due.
        ORDER BY t.run_at
        LIMIT 1
    ) AS t
), outlook AS (
    -- What the claim saw of the work it left, so the worker knows when to
    -- claim again rather than waiting for its poll. Read only when the
    -- claim took fewer than @max: CASE evaluates its subqueries lazily, so
    -- a full claim (a busy worker's) pays nothing for it.
    SELECT CASE WHEN n.claimed < @max THEN least(
            -- The next run time of work not yet due (delayed starts,
            -- retries, timers): one probe of tasks_age_idx per queue and
            -- type key.
            (SELECT min(f.run_at) FROM unnest(@queues::text[]) AS q(queue)
             CROSS JOIN unnest(@types::text[], @versions::integer[]) AS k(type, version)
             CROSS JOIN LATERAL (
                SELECT t.run_at FROM /* TEMPLATE: schema */tasks AS t
                WHERE t.namespace = @namespace AND t.queue = q.queue
                  AND t.type = k.type AND t.type_version = k.version
                  AND t.status IN ('pending', 'retrying') AND t.run_at > now()
                ORDER BY t.run_at LIMIT 1
             ) AS f),
            -- When a rate-limited type whose due work waits has a start
            -- token again, after what this claim spent.
            (SELECT min(clock_timestamp() + make_interval(secs =>
                    (1 - (r.tokens - coalesce(s.started, 0))) * r.per_ms / r.max_starts / 1000.0))
             FROM rates AS r
             LEFT JOIN (SELECT type, count(*) AS started FROM claimed GROUP BY type) AS s ON s.type = r.task_type
             WHERE r.tokens - coalesce(s.started, 0) < 1
               AND EXISTS (SELECT 1 FROM left_due AS d WHERE d.type = r.task_type))
        ) END AS next_at,
        -- A concurrency-limited queue this claim left without a free slot
        -- while due work of it waits: a freed slot is worth a claim.
        CASE WHEN n.claimed < @max THEN EXISTS (
            SELECT 1 FROM caps
            WHERE caps.free <= (SELECT count(*) FROM claimed AS c WHERE c.queue = caps.queue)
              AND EXISTS (SELECT 1 FROM left_due AS d WHERE d.queue = caps.queue)
        ) ELSE false END AS held_back
    FROM (SELECT count(*) AS claimed FROM claimed) AS n
)
SELECT o.next_at, o.held_back, c.id, c.namespace, c.queue, c.type, c.type_version, c.status, c.priority, c.run_at,
    c.attempt, c.max_attempts, c.lease_owner, c.lease_epoch, c.lease_expires_at,
    c.idempotency_key, c.trace_id, c.input, c.output, c.last_error, c.cancel_requested,
    c.last_seq, c.created_at, c.updated_at, c.started_at, c.finished_at, c.labels, c.deadline, c.start_deadline,
    c.fairness_key, c.fairness_weight, c.parent_id, c.parent_position,
    h.seqs, h.types, h.ats, h.attempts, h.datas
FROM outlook AS o LEFT JOIN (claimed AS c LEFT JOIN LATERAL (
    -- A fresh task's history is task_scheduled alone, which its row holds
    -- (the projection equals the replay): read events only for the others.
    SELECT array_agg(e.seq ORDER BY e.seq) AS seqs, array_agg(e.type ORDER BY e.seq) AS types,
        array_agg(e.at ORDER BY e.seq) AS ats, array_agg(e.attempt ORDER BY e.seq) AS attempts,
        array_agg(e.data::text ORDER BY e.seq) AS datas
    -- In the WHERE, not the join's ON, the test is a one-time filter: the
    -- index is not even probed for a fresh task.
    FROM /* TEMPLATE: schema */events AS e WHERE c.last_seq > 2 AND e.task_id = c.id
) AS h ON true) ON true;

-- name: EventAppendMany
-- Appends events to many tasks and writes each task's projection row,
-- computed by replaying its new events, in one statement (group commit).
-- Optimistic concurrency per task: nothing is written for a task unless it
-- is still at its expected seq and, when its epoch is not 0, still under that
-- lease epoch (and, for the rescuer, its lease has expired by the database
-- clock). A batch holds at most one entry per task. lease_expires_at is owned
-- by claims and heartbeats: kept while the lease goes on, cleared when it
-- ends. Finished tasks are announced on the done channel, at most 200 ids
-- per notification to stay under PostgreSQL's payload limit; tasks due again
-- at once, and slots freed in concurrency-limited queues, wake workers on
-- the ready channel.
WITH input AS (
    SELECT * FROM unnest(
        @ids::uuid[], @expected_seqs::bigint[], @epochs::bigint[], @expired_only::boolean[],
        @statuses::text[], @run_ats::timestamptz[], @attempts::integer[], @lease_owners::text[],
        @lease_epochs::bigint[], @outputs::jsonb[], @last_errors::jsonb[], @cancel_requesteds::boolean[],
        @last_seqs::bigint[], @updated_ats::timestamptz[], @started_ats::timestamptz[], @finished_ats::timestamptz[],
        @fair_ats::timestamptz[], @erased::boolean[], @added_bytes::bigint[], @max_bytes::bigint[])
        AS i(id, expected_seq, epoch, expired_only, status, run_at, attempt, lease_owner,
             lease_epoch, output, last_error, cancel_requested, last_seq, updated_at, started_at, finished_at, fair_at,
             erased, added_bytes, max_bytes)
), upd AS (
    UPDATE /* TEMPLATE: schema */tasks AS t SET
        status = i.status,
        run_at = i.run_at,
        -- A keyed task due again keeps its place among its key's tasks
        -- (a retry does not jump its key's backlog); others go by run time,
        -- but a parent its children woke by its creation (@fair_ats: see
        -- plan.WokenParentFairAt).
        fair_at = CASE WHEN t.fairness_key IS NULL THEN i.fair_at ELSE greatest(i.fair_at, t.fair_at) END,
        attempt = i.attempt,
        lease_owner = i.lease_owner,
        lease_epoch = i.lease_epoch,
        lease_expires_at = CASE WHEN i.lease_owner IS NULL THEN NULL ELSE t.lease_expires_at END,
        output = i.output,
        last_error = i.last_error,
        cancel_requested = i.cancel_requested,
        last_seq = i.last_seq,
        updated_at = i.updated_at,
        started_at = i.started_at,
        finished_at = i.finished_at,
        -- task_erased destroys the data key with the event (crypto-shredding).
        data_key = CASE WHEN i.erased THEN NULL ELSE t.data_key END,
        history_bytes = t.history_bytes + i.added_bytes
    FROM input AS i
    WHERE t.id = i.id
      AND t.last_seq = i.expected_seq
      AND (i.epoch = 0 OR t.lease_epoch = i.epoch)
      AND (NOT i.expired_only OR t.lease_expires_at < now())
      -- A signal's bound on the history's bytes (plan.HistoryBound).
      AND (i.max_bytes = 0 OR t.history_bytes + i.added_bytes <= i.max_bytes)
    RETURNING t.id, t.namespace, t.status, t.queue, t.run_at, t.cancel_requested
), ev AS (
    INSERT INTO /* TEMPLATE: schema */events (task_id, seq, type, at, attempt, data)
    SELECT e.task_id, e.seq, e.type, e.at, e.attempt, e.data
    FROM unnest(@ev_task_ids::uuid[], @ev_seqs::bigint[], @ev_types::text[], @ev_ats::timestamptz[],
                @ev_attempts::integer[], @ev_datas::jsonb[]) AS e(task_id, seq, type, at, attempt, data)
    WHERE e.task_id IN (SELECT id FROM upd)
), done AS (
    SELECT pg_notify(@done_channel, string_agg(id::text, ','))
    FROM (SELECT id, (row_number() OVER ()) / 200 AS chunk FROM upd
          WHERE status IN ('completed', 'failed', 'cancelled', 'dead_lettered', 'expired', 'continued')) AS finished
    GROUP BY chunk
), ready AS (
    -- Released and rescued tasks are due at once: wake workers now rather
    -- than at their next poll. clock_timestamp(), not now(): in a longer
    -- transaction (a child's end writing into its parent) now() is its
    -- start, before the run time a wake-up sets from the writer's clock.
    SELECT pg_notify(@ready_channel, queue)
    FROM (SELECT DISTINCT queue FROM upd WHERE status IN ('pending', 'retrying') AND run_at <= clock_timestamp()) AS due
), freed AS (
    -- Tasks of concurrency-limited queues that left running (an append
    -- under their lease, or the rescuer's, that ends the attempt): a slot
    -- is free, and workers held back by the limit claim it now rather
    -- than at their next poll. Queues without a limit send nothing.
    SELECT pg_notify(@ready_channel, f.queue)
    FROM (SELECT DISTINCT upd.namespace, upd.queue FROM upd JOIN input AS i ON i.id = upd.id
          WHERE upd.status <> 'running' AND (i.epoch <> 0 OR i.expired_only)) AS f
    WHERE EXISTS (SELECT 1 FROM /* TEMPLATE: schema */queues AS q
                  WHERE q.namespace = f.namespace AND q.name = f.queue AND q.concurrency IS NOT NULL)
), cancel AS (
    -- Running tasks whose cancel is requested: their workers stop them.
    SELECT pg_notify(@cancel_channel, string_agg(id::text, ','))
    FROM (SELECT id, (row_number() OVER ()) / 200 AS chunk FROM upd
          WHERE cancel_requested AND status = 'running') AS cancelling
    GROUP BY chunk
)
SELECT upd.id FROM upd
WHERE (SELECT count(*) FROM done) >= 0 AND (SELECT count(*) FROM ready) >= 0 AND (SELECT count(*) FROM freed) >= 0
  AND (SELECT count(*) FROM cancel) >= 0;

-- name: TaskLockMany
-- Locks tasks' rows in id order: a batch that ends children takes its
-- tasks' and their parents' rows this way before it writes, so two such
-- batches sharing a parent queue rather than deadlock.
SELECT id, last_seq FROM /* TEMPLATE: schema */tasks WHERE id = ANY(@ids::uuid[]) ORDER BY id FOR UPDATE;

-- name: EventListAfter
-- The events of tasks after a seq each (a parent's since the state this
-- process has of it; an attempt's since its state), by the primary key.
SELECT e.task_id, e.seq, e.type, e.at, e.attempt, e.data
FROM unnest(@ids::uuid[], @afters::bigint[]) AS a(id, after)
JOIN /* TEMPLATE: schema */events AS e ON e.task_id = a.id AND e.seq > a.after
ORDER BY e.task_id, e.seq;

-- name: EventListAfterIn
-- EventListAfter of the tasks of @namespace only (a request's read).
SELECT e.task_id, e.seq, e.type, e.at, e.attempt, e.data
FROM unnest(@ids::uuid[], @afters::bigint[]) AS a(id, after)
JOIN /* TEMPLATE: schema */tasks AS t ON t.id = a.id AND t.namespace = @namespace
JOIN /* TEMPLATE: schema */events AS e ON e.task_id = a.id AND e.seq > a.after
ORDER BY e.task_id, e.seq;

-- name: TaskFenceByID
-- Tells a refused append apart: not found, moved on, fenced, or full.
SELECT last_seq, lease_epoch, lease_owner IS NOT NULL, history_bytes FROM /* TEMPLATE: schema */tasks WHERE id = @id;

-- name: LeaseExtendMany
-- Extends the leases still held under the given epochs; a lease not returned
-- is lost. The reply says which of the tasks have a cancel request, and which
-- were busy: their rows locked by another writer at that moment (an append
-- under the lease, a cancel request), so not extended this time, but still
-- under the epoch. A heartbeat never waits for a row lock (SKIP LOCKED), so
-- it cannot deadlock with the batched append, whatever order either walks
-- its rows in (40P01 cost about a second each), nor queue behind a long
-- transaction and let leases run out.
WITH wanted AS (
    SELECT t.id, t.cancel_requested
    FROM unnest(@ids::uuid[], @epochs::bigint[]) AS l(id, epoch)
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = l.id AND t.lease_epoch = l.epoch
    WHERE t.status = 'running'
), held AS (
    SELECT t.id
    FROM unnest(@ids::uuid[], @epochs::bigint[]) AS l(id, epoch)
    JOIN /* TEMPLATE: schema */tasks AS t ON t.id = l.id AND t.lease_epoch = l.epoch
    WHERE t.status = 'running'
    FOR UPDATE OF t SKIP LOCKED
), renewed AS (
    UPDATE /* TEMPLATE: schema */tasks AS t
    SET lease_expires_at = now() + make_interval(secs => @lease_seconds)
    FROM held
    WHERE t.id = held.id
    RETURNING t.id, t.cancel_requested
)
SELECT id, cancel_requested, false AS busy FROM renewed
UNION ALL
SELECT id, cancel_requested, true FROM wanted WHERE id NOT IN (SELECT id FROM renewed);

-- name: TaskListExpired
-- Running tasks whose lease expired @expired_for_seconds ago or earlier,
-- oldest first (tasks_lease_idx).
SELECT id FROM /* TEMPLATE: schema */tasks
WHERE status = 'running' AND lease_expires_at < now() - make_interval(secs => @expired_for_seconds)
ORDER BY lease_expires_at
LIMIT @max;

-- name: TaskLeaseNextExpiry
-- Seconds until the first lease TaskListExpired does not list yet will be
-- listed (NULL: none): the first entry of tasks_lease_idx past the cut.
SELECT extract(epoch FROM (
    SELECT lease_expires_at FROM /* TEMPLATE: schema */tasks
    WHERE status = 'running' AND lease_expires_at >= now() - make_interval(secs => @expired_for_seconds)
    ORDER BY lease_expires_at
    LIMIT 1
) + make_interval(secs => @expired_for_seconds) - now())::double precision;

-- name: TaskGetByID
SELECT id, namespace, queue, type, type_version, status, priority, run_at,
    attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
    idempotency_key, trace_id, input, output, last_error, cancel_requested,
    last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
    fairness_key, fairness_weight, parent_id, parent_position
FROM /* TEMPLATE: schema */tasks WHERE id = @id AND namespace = @namespace;

-- name: TaskGetByKey
-- The task holding an idempotency key (a signal by key), by the key's
-- unique index.
SELECT id, namespace, queue, type, type_version, status, priority, run_at,
    attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
    idempotency_key, trace_id, input, output, last_error, cancel_requested,
    last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
    fairness_key, fairness_weight, parent_id, parent_position
FROM /* TEMPLATE: schema */tasks WHERE namespace = @namespace AND idempotency_key = @idempotency_key;

-- name: TaskGetMany
-- Tasks by id, of @namespace, or of any when it is ''.
SELECT id, namespace, queue, type, type_version, status, priority, run_at,
    attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
    idempotency_key, trace_id, input, output, last_error, cancel_requested,
    last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
    fairness_key, fairness_weight, parent_id, parent_position
FROM /* TEMPLATE: schema */tasks
WHERE id = ANY(@ids::uuid[]) AND (@namespace::text = '' OR namespace = @namespace);

-- name: TaskList
SELECT id, namespace, queue, type, type_version, status, priority, run_at,
    attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
    idempotency_key, trace_id, input, output, last_error, cancel_requested,
    last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
    fairness_key, fairness_weight, parent_id, parent_position
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace
  AND (@status::text = '' OR status = @status)
  AND (@type::text = '' OR type = @type)
  AND (@queue::text = '' OR queue = @queue)
  AND (NOT @paged::boolean OR id < @before::uuid)
ORDER BY id DESC -- UUIDv7: newest first
LIMIT @max;

-- name: TaskListLean
-- TaskList without the input and output columns: a listing that does not
-- show payloads reads none (they are NULL here, nil in Go).
SELECT id, namespace, queue, type, type_version, status, priority, run_at,
    attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
    idempotency_key, trace_id, NULL::jsonb AS input, NULL::jsonb AS output, last_error, cancel_requested,
    last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
    fairness_key, fairness_weight, parent_id, parent_position
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace
  AND (@status::text = '' OR status = @status)
  AND (@type::text = '' OR type = @type)
  AND (@queue::text = '' OR queue = @queue)
  AND (NOT @paged::boolean OR id < @before::uuid)
ORDER BY id DESC -- UUIDv7: newest first
LIMIT @max;

-- name: TaskListPayloads
-- TaskList bounded in payload bytes as well as rows. The walk steps
-- through the selected tasks newest first, one index probe a step, adding
-- up the size of the payloads asked for (@with_input, @with_output: the
-- JSON text, as the rows return it); it stops at @max rows or at the
-- first task past @max_bytes, so it measures at most one task beyond the
-- bound. The page is the walk's tasks within the bound, and always its
-- first. A payload not asked for is neither measured nor read (NULL).
WITH RECURSIVE walk (wid, n, bytes) AS (
    (SELECT t.id, 1,
        CASE WHEN @with_input::boolean THEN coalesce(octet_length(t.input::text), 0) ELSE 0 END +
        CASE WHEN @with_output::boolean THEN coalesce(octet_length(t.output::text), 0) ELSE 0 END
     FROM /* TEMPLATE: schema */tasks AS t
     WHERE t.namespace = @namespace
       AND (@status::text = '' OR t.status = @status)
       AND (@type::text = '' OR t.type = @type)
       AND (@queue::text = '' OR t.queue = @queue)
       AND (NOT @paged::boolean OR t.id < @before::uuid)
     ORDER BY t.id DESC
     LIMIT 1)
    UNION ALL
    (SELECT t.id, w.n + 1, w.bytes +
        CASE WHEN @with_input::boolean THEN coalesce(octet_length(t.input::text), 0) ELSE 0 END +
        CASE WHEN @with_output::boolean THEN coalesce(octet_length(t.output::text), 0) ELSE 0 END
     FROM walk AS w
     CROSS JOIN LATERAL (
        SELECT nt.id, nt.input, nt.output FROM /* TEMPLATE: schema */tasks AS nt
        WHERE nt.namespace = @namespace
          AND (@status::text = '' OR nt.status = @status)
          AND (@type::text = '' OR nt.type = @type)
          AND (@queue::text = '' OR nt.queue = @queue)
          AND nt.id < w.wid
        ORDER BY nt.id DESC
        LIMIT 1) AS t
     WHERE w.n < @max AND w.bytes <= @max_bytes::bigint)
)
SELECT t.id, t.namespace, t.queue, t.type, t.type_version, t.status, t.priority, t.run_at,
    t.attempt, t.max_attempts, t.lease_owner, t.lease_epoch, t.lease_expires_at,
    t.idempotency_key, t.trace_id,
    CASE WHEN @with_input::boolean THEN t.input END AS input,
    CASE WHEN @with_output::boolean THEN t.output END AS output,
    t.last_error, t.cancel_requested,
    t.last_seq, t.created_at, t.updated_at, t.started_at, t.finished_at, t.labels, t.deadline, t.start_deadline,
    t.fairness_key, t.fairness_weight, t.parent_id, t.parent_position
FROM walk AS w JOIN /* TEMPLATE: schema */tasks AS t ON t.id = w.wid
WHERE w.n = 1 OR w.bytes <= @max_bytes::bigint
ORDER BY t.id DESC;

-- name: EventListByTask
SELECT task_id, seq, type, at, attempt, data FROM /* TEMPLATE: schema */events
WHERE task_id = @task_id ORDER BY seq;

-- name: EventListByTasks
SELECT task_id, seq, type, at, attempt, data FROM /* TEMPLATE: schema */events
WHERE task_id = ANY(@ids::uuid[]) ORDER BY task_id, seq;

-- name: LeaderAttempt
-- Takes or renews the leader lease for @name. Returns a row only when
-- @owner holds the lease afterwards.
INSERT INTO /* TEMPLATE: schema */leaders AS l (name, owner, elected_at, expires_at)
VALUES (@name, @owner, now(), now() + make_interval(secs => @ttl_seconds))
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner,
    elected_at = CASE WHEN l.owner = excluded.owner THEN l.elected_at ELSE now() END,
    expires_at = excluded.expires_at
WHERE l.owner = excluded.owner OR l.expires_at < now()
RETURNING owner;

-- name: LeaderResign
DELETE FROM /* TEMPLATE: schema */leaders WHERE name = @name AND owner = @owner;

-- name: DeadLetterList
-- A page of a namespace's dead letters, newest first, from
-- tasks_dead_letter_idx; the cursor is the (finished_at, id) of the last
-- row of the previous page.
SELECT id, namespace, queue, type, type_version, status, priority, run_at,
    attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
    idempotency_key, trace_id, input, output, last_error, cancel_requested,
    last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
    fairness_key, fairness_weight, parent_id, parent_position
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND status = 'dead_lettered'
  AND (@type::text = '' OR type = @type)
  AND (NOT @paged::boolean OR (finished_at, id) < (@before_at::timestamptz, @before_id::uuid))
ORDER BY finished_at DESC, id DESC
LIMIT @max;

-- name: DeadLetterListLean
-- DeadLetterList without the input and output columns.
SELECT id, namespace, queue, type, type_version, status, priority, run_at,
    attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at,
    idempotency_key, trace_id, NULL::jsonb AS input, NULL::jsonb AS output, last_error, cancel_requested,
    last_seq, created_at, updated_at, started_at, finished_at, labels, deadline, start_deadline,
    fairness_key, fairness_weight, parent_id, parent_position
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND status = 'dead_lettered'
  AND (@type::text = '' OR type = @type)
  AND (NOT @paged::boolean OR (finished_at, id) < (@before_at::timestamptz, @before_id::uuid))
ORDER BY finished_at DESC, id DESC
LIMIT @max;

-- name: QueueUpsert
-- A changed limit may let waiting tasks run (a limit raised or lifted):
-- workers held back by it claim now rather than at their next poll.
WITH up AS (
    INSERT INTO /* TEMPLATE: schema */queues (namespace, name, max_waiting, concurrency, updated_at)
    VALUES (@namespace, @name, @max_waiting, @concurrency, now())
    ON CONFLICT (namespace, name) DO UPDATE
    SET max_waiting = excluded.max_waiting, concurrency = excluded.concurrency, updated_at = now()
    RETURNING name
)
SELECT pg_notify(@channel, name) FROM up;

-- name: QueueList
SELECT q.name, q.max_waiting, q.concurrency,
    (SELECT count(*) FROM /* TEMPLATE: schema */tasks AS t
     WHERE t.namespace = q.namespace AND t.queue = q.name AND t.status IN ('pending', 'retrying')) AS waiting,
    (SELECT count(*) FROM /* TEMPLATE: schema */tasks AS t
     WHERE t.namespace = q.namespace AND t.queue = q.name AND t.status = 'running') AS running
FROM /* TEMPLATE: schema */queues AS q
WHERE q.namespace = @namespace
ORDER BY q.name;

-- name: ClaimLocks
-- Locks, before a claim, the rows of the concurrency-limited queues and the
-- rate-limited types it serves, in key order: claims of a limited queue or
-- type then count and spend one after the other, so the limits hold across
-- workers. Nothing is locked when no limit is set.
WITH limited_queues AS (
    SELECT name FROM /* TEMPLATE: schema */queues
    WHERE namespace = @namespace AND name = ANY(@queues::text[]) AND concurrency IS NOT NULL
    ORDER BY name
    FOR UPDATE
), limited_types AS (
    SELECT task_type FROM /* TEMPLATE: schema */rate_limits
    WHERE namespace = @namespace AND task_type = ANY(@types::text[])
    ORDER BY task_type
    FOR UPDATE
)
SELECT (SELECT count(*) FROM limited_queues), (SELECT count(*) FROM limited_types);

-- name: RateLimitUpsert
INSERT INTO /* TEMPLATE: schema */rate_limits (namespace, task_type, max_starts, per_ms, tokens, refilled_at)
VALUES (@namespace, @task_type, @max_starts::integer, @per_ms::bigint, @max_starts::integer, now())
ON CONFLICT (namespace, task_type) DO UPDATE
SET max_starts = excluded.max_starts, per_ms = excluded.per_ms,
    tokens = least(rate_limits.tokens, excluded.max_starts), refilled_at = now();

-- name: RateLimitDelete
DELETE FROM /* TEMPLATE: schema */rate_limits WHERE namespace = @namespace AND task_type = @task_type;

-- name: QueueBoundedLock
-- Locks the rows of the bounded queues among those a start writes to, in
-- name order: concurrent starts to a bounded queue then count and insert
-- one after the other.
SELECT namespace, name, max_waiting FROM /* TEMPLATE: schema */queues
WHERE (namespace, name) IN (SELECT * FROM unnest(@namespaces::text[], @names::text[]))
  AND max_waiting IS NOT NULL
ORDER BY namespace, name
FOR UPDATE;

-- name: TaskHoldingKeysLock
-- The tasks holding the idempotency keys of a start into a bounded queue,
-- with what a RefuseKeyReuse start compares; locked against removal until
-- the start commits, so a start counted as existing stays existing.
SELECT namespace, idempotency_key, type, input FROM /* TEMPLATE: schema */tasks
WHERE (namespace, idempotency_key) IN (SELECT * FROM unnest(@namespaces::text[], @keys::text[]))
FOR KEY SHARE;

-- name: RetiredKeysHoldingLock
-- The retired keys among a start's (tasks retention removed), locked
-- against their expiry until the start commits.
SELECT namespace, idempotency_key, task_type, input_sha256 FROM /* TEMPLATE: schema */retired_keys
WHERE (namespace, idempotency_key) IN (SELECT * FROM unnest(@namespaces::text[], @keys::text[]))
  AND expires_at > @at
FOR KEY SHARE;

-- name: QueueWaitingCount
SELECT count(*) FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND queue = @queue AND status IN ('pending', 'retrying');

-- name: QueueRunning
-- A queue's running tasks and the mean age of their attempts (since the
-- task's first start: an overestimate for retries), from tasks_running_idx:
-- the rate the queue drains at, for a full queue's retry-after hint.
SELECT count(*)::integer, coalesce(extract(epoch FROM avg(now() - started_at)), 0)::double precision
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND queue = @queue AND status = 'running';

-- name: TaskListStartExpired
-- Tasks never started whose start deadline has passed, oldest deadline
-- first, for the sweep that expires them.
SELECT id FROM /* TEMPLATE: schema */tasks
WHERE status = 'pending' AND attempt = 0 AND start_deadline IS NOT NULL AND start_deadline <= now()
ORDER BY start_deadline
LIMIT @max;

-- name: IndexSummarize
-- Summarizes the page ranges of events_at_brin_idx filled since its last
-- summary (IndexSummarize in leader.go), as the index's owner (migration
-- 0026's function).
SELECT /* TEMPLATE: schema */summarize_event_ranges();

-- name: ScheduleInsert
INSERT INTO /* TEMPLATE: schema */schedules
    (namespace, name, cron, timezone, task_type, type_version, queue, input, max_attempts, next_run_at, created_at, updated_at)
VALUES (@namespace, @name, @cron, @timezone, @task_type, @type_version, @queue, @input, @max_attempts, @next_run_at, now(), now())
ON CONFLICT (namespace, name) DO NOTHING;

-- name: ScheduleList
SELECT namespace, name, cron, timezone, task_type, type_version, queue, input, max_attempts, paused, next_run_at, last_tick,
    retry_at, last_skipped_at, last_skip_reason
FROM /* TEMPLATE: schema */schedules
WHERE namespace = @namespace
ORDER BY name;

-- name: ScheduleGetForUpdate
SELECT namespace, name, cron, timezone, task_type, type_version, queue, input, max_attempts, paused, next_run_at, last_tick,
    retry_at, last_skipped_at, last_skip_reason
FROM /* TEMPLATE: schema */schedules
WHERE namespace = @namespace AND name = @name
FOR UPDATE;

-- name: ScheduleSetPaused
UPDATE /* TEMPLATE: schema */schedules SET paused = @paused, next_run_at = @next_run_at, retry_at = NULL, updated_at = now()
WHERE namespace = @namespace AND name = @name;

-- name: ScheduleDelete
DELETE FROM /* TEMPLATE: schema */schedules WHERE namespace = @namespace AND name = @name;

-- name: ScheduleListDue
-- Due schedules (schedules_due_idx) of @namespace ('' for every one),
-- earliest first, locked for firing until the transaction ends: another
-- firer's list skips them. A skipped schedule is due again at its
-- retry_at.
SELECT namespace, name, cron, timezone, task_type, type_version, queue, input, max_attempts, paused, next_run_at, last_tick,
    retry_at, last_skipped_at, last_skip_reason
FROM /* TEMPLATE: schema */schedules
WHERE NOT paused AND coalesce(retry_at, next_run_at) <= now() AND (@namespace::text = '' OR namespace = @namespace)
ORDER BY coalesce(retry_at, next_run_at)
LIMIT @max
FOR UPDATE SKIP LOCKED;

-- name: ScheduleNextDue
-- When the next active schedule of @namespace ('' for every one) is due
-- (schedules_due_idx).
SELECT min(coalesce(retry_at, next_run_at)) FROM /* TEMPLATE: schema */schedules
WHERE NOT paused AND (@namespace::text = '' OR namespace = @namespace);

-- name: ScheduleFired
UPDATE /* TEMPLATE: schema */schedules SET next_run_at = @next_run_at, last_tick = @last_tick, retry_at = NULL, updated_at = now()
WHERE namespace = @namespace AND name = @name;

-- name: ScheduleSkipped
-- A tick its queue refused: the schedule stays at the tick and is tried
-- again at @retry_at.
UPDATE /* TEMPLATE: schema */schedules SET next_run_at = @next_run_at, retry_at = @retry_at,
    last_skipped_at = @skipped_at, last_skip_reason = @reason, updated_at = now()
WHERE namespace = @namespace AND name = @name;

-- name: QueueWaits
-- Due waiting tasks per queue and priority, with the oldest's run time:
-- how long the longest-waiting task of each priority has waited.
SELECT queue, priority, count(*), min(run_at)
FROM /* TEMPLATE: schema */tasks
WHERE namespace = @namespace AND status IN ('pending', 'retrying') AND run_at <= now()
GROUP BY queue, priority
ORDER BY queue, priority DESC;

-- name: TaskRemovableLock
-- Locks up to @max finished tasks of a namespace that finished before
-- @before, oldest first (tasks_finished_idx), skipping rows another
-- transaction holds; never a task with a child not yet finished
-- (tasks_parent_idx) nor a child whose parent has not finished.
SELECT t.id, t.idempotency_key, t.type, CASE WHEN t.idempotency_key IS NOT NULL THEN t.input END
FROM /* TEMPLATE: schema */tasks AS t
WHERE t.namespace = @namespace AND t.finished_at IS NOT NULL AND t.finished_at < @scan_before
  -- A type with a retention of its own goes by its cutoff.
  AND t.finished_at < coalesce((SELECT u.cutoff FROM unnest(@type_names::text[], @type_cutoffs::timestamptz[]) AS u(name, cutoff)
                                WHERE u.name = t.type), @before)
  AND t.status IN ('completed', 'failed', 'cancelled', 'dead_lettered', 'expired', 'continued')
  AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS c
                  WHERE c.parent_id = t.id AND c.finished_at IS NULL)
  AND (t.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS p
                                         WHERE p.id = t.parent_id AND p.finished_at IS NULL))
  -- With @only_ids: only those tasks, each at the last seq archived.
  AND (@only_ids::uuid[] IS NULL OR (t.id, t.last_seq) IN (
        SELECT * FROM unnest(@only_ids::uuid[], @only_seqs::bigint[])))
ORDER BY t.finished_at
LIMIT @max
FOR UPDATE OF t SKIP LOCKED;

-- name: TaskRemovableList
-- The tasks TaskRemovableLock would lock, without locking them: what
-- archival reads before the removal.
SELECT t.id
FROM /* TEMPLATE: schema */tasks AS t
WHERE t.namespace = @namespace AND t.finished_at IS NOT NULL AND t.finished_at < @scan_before
  -- A type with a retention of its own goes by its cutoff.
  AND t.finished_at < coalesce((SELECT u.cutoff FROM unnest(@type_names::text[], @type_cutoffs::timestamptz[]) AS u(name, cutoff)
                                WHERE u.name = t.type), @before)
  AND t.status IN ('completed', 'failed', 'cancelled', 'dead_lettered', 'expired', 'continued')
  AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS c
                  WHERE c.parent_id = t.id AND c.finished_at IS NULL)
  AND (t.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS p
                                         WHERE p.id = t.parent_id AND p.finished_at IS NULL))
ORDER BY t.finished_at
LIMIT @max;

-- name: TaskRemove
-- Removes tasks whole, their events first (the append-only trigger lets
-- retention delete: the caller set cairn.retention for its transaction),
-- and keeps their idempotency keys taken until @keys_until.
WITH retired AS (
    INSERT INTO /* TEMPLATE: schema */retired_keys (namespace, idempotency_key, task_id, task_type, input_sha256, removed_at, expires_at)
    SELECT @namespace, r.key, r.id, r.type, r.digest, @now, @keys_until
    FROM unnest(@ids::uuid[], @keys::text[], @types::text[], @digests::bytea[]) AS r(id, key, type, digest)
    WHERE r.key IS NOT NULL AND @keys_until::timestamptz > @now::timestamptz
    ON CONFLICT (namespace, idempotency_key) DO UPDATE
        SET task_id = excluded.task_id, task_type = excluded.task_type, input_sha256 = excluded.input_sha256,
            removed_at = excluded.removed_at, expires_at = excluded.expires_at
), ev AS (
    DELETE FROM /* TEMPLATE: schema */events WHERE task_id = ANY(@ids::uuid[]) RETURNING 1
), blobs AS (
    DELETE FROM /* TEMPLATE: schema */blobs WHERE task_id = ANY(@ids::uuid[]) RETURNING key, task_id, location
), streams AS (
    DELETE FROM /* TEMPLATE: schema */stream_entries WHERE task_id = ANY(@ids::uuid[])
), reservations AS (
    DELETE FROM /* TEMPLATE: schema */budget_reservations WHERE task_id = ANY(@ids::uuid[])
), waits AS (
    DELETE FROM /* TEMPLATE: schema */budget_waits WHERE task_id = ANY(@ids::uuid[])
), own_budgets AS (
    -- The window of each task's own budget (it covered the task and its
    -- descendants, which retention removes first).
    DELETE FROM /* TEMPLATE: schema */budget_windows
    WHERE namespace = @namespace AND ref = ANY(SELECT 'task:' || id::text FROM unnest(@ids::uuid[]) AS id)
), gone AS (
    DELETE FROM /* TEMPLATE: schema */tasks WHERE id = ANY(@ids::uuid[]) RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM ev),
    -- The blobs whose bytes are in a blob store: the caller deletes them.
    -- Three arrays in one order (by key, unique in the namespace).
    (SELECT coalesce(array_agg(key ORDER BY key), '{}') FROM blobs WHERE location IS NOT NULL),
    (SELECT coalesce(array_agg(task_id ORDER BY key), '{}') FROM blobs WHERE location IS NOT NULL),
    (SELECT coalesce(array_agg(location ORDER BY key), '{}') FROM blobs WHERE location IS NOT NULL);

-- name: RetiredKeysExpire
-- Drops up to @max retired keys past their time by the store's clock
-- (@now, the clock starts judge keys by), skipping rows a start holds.
DELETE FROM /* TEMPLATE: schema */retired_keys
WHERE (namespace, idempotency_key) IN (
    SELECT namespace, idempotency_key FROM /* TEMPLATE: schema */retired_keys
    WHERE expires_at <= @now ORDER BY expires_at LIMIT @max FOR UPDATE SKIP LOCKED);

-- name: NamespaceUpsert
INSERT INTO /* TEMPLATE: schema */namespaces (name, retention_ms, key_retention_ms, archive, type_retention, stream_ttl_ms, updated_at)
VALUES (@name, @retention_ms, @key_retention_ms, @archive, @type_retention::jsonb, @stream_ttl_ms, now())
ON CONFLICT (name) DO UPDATE
SET retention_ms = excluded.retention_ms, key_retention_ms = excluded.key_retention_ms, archive = excluded.archive,
    type_retention = excluded.type_retention, stream_ttl_ms = excluded.stream_ttl_ms, updated_at = now();

-- name: NamespaceList
-- The namespaces with settings, and those with finished tasks, found by a
-- skip scan of tasks_finished_idx (one probe per namespace, however many
-- tasks each has).
WITH RECURSIVE seen AS (
    (SELECT namespace FROM /* TEMPLATE: schema */tasks WHERE finished_at IS NOT NULL ORDER BY namespace LIMIT 1)
    UNION ALL
    SELECT (SELECT t.namespace FROM /* TEMPLATE: schema */tasks AS t
            WHERE t.finished_at IS NOT NULL AND t.namespace > seen.namespace ORDER BY t.namespace LIMIT 1)
    FROM seen WHERE seen.namespace IS NOT NULL
)
SELECT coalesce(n.name, s.namespace), n.retention_ms, n.key_retention_ms, n.archive, n.type_retention::text, n.stream_ttl_ms,
    -- The oldest finished task kept: the namespace's first entry of
    -- tasks_finished_idx.
    (SELECT min(t.finished_at) FROM /* TEMPLATE: schema */tasks AS t
     WHERE t.namespace = coalesce(n.name, s.namespace) AND t.finished_at IS NOT NULL)
FROM /* TEMPLATE: schema */namespaces AS n
FULL JOIN (SELECT namespace FROM seen WHERE namespace IS NOT NULL) AS s ON s.namespace = n.name
ORDER BY 1;

-- name: BlobInsert
INSERT INTO /* TEMPLATE: schema */blobs (namespace, key, task_id, content_type, size, sha256, data, created_at, location)
VALUES (@namespace, @key, @task_id, @content_type, @size, @sha256, @data, now(), @location);

-- name: BlobGet
SELECT task_id, content_type, sha256, data, created_at, location, size FROM /* TEMPLATE: schema */blobs
WHERE namespace = @namespace AND key = @key;

-- name: TaskDataKeys
-- The wrapped data keys of the tasks of @ids that have one (in
-- @namespace, unless it is '').
SELECT id, data_key FROM /* TEMPLATE: schema */tasks
WHERE id = ANY(@ids::uuid[]) AND data_key IS NOT NULL AND (@namespace::text = '' OR namespace = @namespace);

-- name: TaskDataKeySet
-- Gives a task still to finish that has no data key @data_key, and returns
-- the key the task holds then (NULL: it has finished without one, was
-- erased, or is gone).
WITH upd AS (
    UPDATE /* TEMPLATE: schema */tasks SET data_key = @data_key::bytea
    WHERE id = @id::uuid AND data_key IS NULL AND status IN ('pending', 'running', 'retrying')
    RETURNING data_key
)
SELECT coalesce((SELECT data_key FROM upd), (SELECT data_key FROM /* TEMPLATE: schema */tasks WHERE id = @id::uuid));

-- name: BlobInsertForStarted
-- The blobs of starts (an input kept by reference), written in the start's
-- transaction, after its insert: only those whose task the insert created
-- (a start whose idempotency key was taken made none).
INSERT INTO /* TEMPLATE: schema */blobs (namespace, key, task_id, content_type, size, sha256, data, created_at, location)
SELECT b.namespace, b.key, b.task_id, b.content_type, b.size, b.sha256, b.data, now(), b.location
FROM unnest(@namespaces::text[], @keys::text[], @task_ids::uuid[], @content_types::text[], @sizes::bigint[],
            @sha256s::bytea[], @datas::bytea[], @locations::text[]) AS b(namespace, key, task_id, content_type, size, sha256, data, location)
WHERE EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS t WHERE t.id = b.task_id AND t.created_at = @at);

-- name: BlobKeysByTasks
SELECT task_id, key FROM /* TEMPLATE: schema */blobs
WHERE namespace = @namespace AND task_id = ANY(@ids::uuid[]) ORDER BY task_id, key;

-- name: SignalSeen
-- Whether a task received a signal with this dedup id, by the partial
-- index events_signal_dedup (not by reading the signals).
SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */events
               WHERE task_id = @task_id AND type = 'signal_received' AND data ->> 'dedup_id' = @dedup_id::text);

-- name: WaitOpen
-- The wait_started of the wait a task is in after its first @last_seq
-- events (history.State.Wait): its last wait_started or wait_timed_out, if
-- a wait_started and no signal of the wait's name came after it (nor, for
-- a select's, what ends a select's wait). By the
-- partial indexes events_waits and events_signal_name: no payload but the
-- wait's own is read.
SELECT w.data FROM (
    SELECT seq, type, data FROM /* TEMPLATE: schema */events
    WHERE task_id = @task_id AND seq <= @last_seq AND type IN ('wait_started', 'wait_timed_out')
    ORDER BY seq DESC LIMIT 1
) AS w
WHERE w.type = 'wait_started'
  AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */events AS s
                  WHERE s.task_id = @task_id AND s.type = 'signal_received' AND s.data ->> 'name' = w.data ->> 'name'
                    AND s.seq > w.seq AND s.seq <= @last_seq)
  -- A select's wait (history.SelectWait) ends at a signal of one of its
  -- names, the end of one of its children, or its decision: the events
  -- after it, by the primary key, read for a select's wait only (it is
  -- decided in the attempt after it ends, so they are few).
  AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */events AS x
                  WHERE w.data -> 'select' IS NOT NULL
                    AND x.task_id = @task_id AND x.seq > w.seq AND x.seq <= @last_seq
                    AND (x.type = 'select_matched'
                         OR (x.type = 'signal_received' AND coalesce(w.data -> 'select' -> 'signals', '[]') @> jsonb_build_array(x.data ->> 'name'))
                         OR (x.type = 'child_finished' AND coalesce(w.data -> 'select' -> 'children', '[]') @> jsonb_build_array(x.data -> 'position'))));

-- name: EventListPage
-- A page of a task's events after a seq, by the primary key; nothing when
-- the task is not in the namespace. The reader stops at its byte bound
-- (EventPageParams.MaxBytes): the rows it does not read are not kept.
SELECT e.seq, e.type, e.at, e.attempt, e.data FROM /* TEMPLATE: schema */events AS e
WHERE e.task_id = @task_id AND e.seq > @after
  AND EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS t WHERE t.id = @task_id AND t.namespace = @namespace)
ORDER BY e.seq
LIMIT @limit;

-- name: StrandedDelete
-- A worker's findings of one type and version, before it records new ones
-- (StrandedInsert, in the same batch).
DELETE FROM /* TEMPLATE: schema */stranded_tasks
WHERE namespace = @namespace AND type = @type AND version = @version AND worker_id = @worker_id;

-- name: StrandedInsert
INSERT INTO /* TEMPLATE: schema */stranded_tasks (namespace, type, version, worker_id, task_id, kind, position,
    recorded, called, error, found_at)
SELECT @namespace, @type, @version, @worker_id, f.task_id, f.kind, f.position, f.recorded, f.called, f.error, now()
FROM unnest(@task_ids::uuid[], @kinds::text[], @positions::integer[], @recorded::text[], @called::text[], @errors::text[])
    AS f(task_id, kind, position, recorded, called, error);

-- name: StrandedList
-- Findings of tasks not finished, oldest found first, with the task's
-- status and run time now.
SELECT s.namespace, s.type, s.version, s.worker_id, s.task_id, s.kind, s.position, s.recorded, s.called, s.error,
    s.found_at, t.status, t.run_at, t.queue
FROM /* TEMPLATE: schema */stranded_tasks AS s
JOIN /* TEMPLATE: schema */tasks AS t ON t.id = s.task_id AND t.namespace = s.namespace
WHERE s.namespace = @namespace AND (@type::text = '' OR s.type = @type) AND (@queue::text = '' OR t.queue = @queue)
  AND t.status IN ('pending', 'running', 'retrying')
ORDER BY s.found_at, s.task_id
LIMIT @limit;

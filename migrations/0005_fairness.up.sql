-- Fairness keys. A task may carry a fairness key (a tenant, a user, a chat)
-- and a weight. Within a queue, the claim orders due tasks of one priority by
-- fair_at, a virtual start time: a task without a key has its run time; a
-- keyed task is placed one quantum (divided by its weight) after the last
-- task of its key still waiting, so a key with a backlog is pushed back and a
-- key that waits for nothing starts at once. fair_at is a scheduling hint
-- kept on the row only, like an index: it is not part of the task's history.
ALTER TABLE /* TEMPLATE: schema */tasks ADD COLUMN fairness_key text;
ALTER TABLE /* TEMPLATE: schema */tasks ADD COLUMN fairness_weight integer CHECK (fairness_weight > 0);
ALTER TABLE /* TEMPLATE: schema */tasks ADD COLUMN fair_at timestamptz;
UPDATE /* TEMPLATE: schema */tasks SET fair_at = run_at;
ALTER TABLE /* TEMPLATE: schema */tasks ALTER COLUMN fair_at SET NOT NULL;

-- The claim walks due tasks by priority, then virtual start time. run_at is
-- a key column so the claim's "due now" test is checked in the index,
-- without a heap visit for each task not yet due.
DROP INDEX /* TEMPLATE: schema */tasks_claim_idx;
CREATE INDEX tasks_claim_idx
    ON /* TEMPLATE: schema */tasks (namespace, queue, type, type_version, priority DESC, fair_at, run_at, id)
    WHERE status IN ('pending', 'retrying');

-- Finds the last waiting task of a fairness key, for the next one's place.
-- Holds keyed tasks only: queues without keys pay nothing for it.
CREATE INDEX tasks_fairness_idx
    ON /* TEMPLATE: schema */tasks (namespace, queue, fairness_key, fair_at)
    WHERE status IN ('pending', 'retrying') AND fairness_key IS NOT NULL;

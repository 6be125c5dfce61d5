-- Fairness keys: a task's key, weight and virtual start time (fair_at; see
-- the PostgreSQL twin of this file).
ALTER TABLE tasks ADD COLUMN fairness_key TEXT;
ALTER TABLE tasks ADD COLUMN fairness_weight INTEGER CHECK (fairness_weight > 0);
ALTER TABLE tasks ADD COLUMN fair_at INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET fair_at = run_at;

DROP INDEX tasks_claim_idx;
CREATE INDEX tasks_claim_idx
    ON tasks (namespace, queue, type, type_version, priority DESC, fair_at, run_at, id)
    WHERE status IN ('pending', 'retrying');

CREATE INDEX tasks_fairness_idx
    ON tasks (namespace, queue, fairness_key, fair_at)
    WHERE status IN ('pending', 'retrying') AND fairness_key IS NOT NULL;

-- Budget rows removed with their task: as PostgreSQL's 0025_budget_retention.
CREATE INDEX budget_waits_task ON budget_waits (task_id);

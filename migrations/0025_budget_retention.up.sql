-- Retention removes what a removed task kept beside its log for budgets
-- (issue 38): its open reservations, its waits and its own budget's
-- window (ref task:<id>). Waits are found by task.
CREATE INDEX budget_waits_task ON /* TEMPLATE: schema */budget_waits (task_id);

-- Continue-as-new (issue 36): a run that continued as new ends with the
-- terminal status continued (history.StatusContinued).
ALTER TABLE /* TEMPLATE: schema */tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE /* TEMPLATE: schema */tasks ADD CONSTRAINT tasks_status_check CHECK (status IN
    ('pending', 'running', 'retrying', 'completed', 'failed', 'cancelled', 'dead_lettered', 'expired', 'continued'));

-- Continue-as-new (issue 36): a run that continued as new ends with the
-- terminal status continued (history.StatusContinued).
--
-- The check is replaced NOT VALID: adding a validated check scans every
-- row of tasks under the ACCESS EXCLUSIVE lock the ALTER takes, blocking
-- claims and appends for the length of the scan. A VALIDATE CONSTRAINT in
-- this file would not help: the runner applies each file in one
-- transaction, so the scan would still run under the lock the DROP took.
-- No row can fail it: each passed the old check, whose statuses the new
-- one all allows, and new and updated rows are checked from now on. An
-- operator may validate it online later (ALTER TABLE tasks VALIDATE
-- CONSTRAINT tasks_status_check takes only SHARE UPDATE EXCLUSIVE).
ALTER TABLE /* TEMPLATE: schema */tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE /* TEMPLATE: schema */tasks ADD CONSTRAINT tasks_status_check CHECK (status IN
    ('pending', 'running', 'retrying', 'completed', 'failed', 'cancelled', 'dead_lettered', 'expired', 'continued')) NOT VALID;

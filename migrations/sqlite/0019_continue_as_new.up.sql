-- Continue-as-new (issue 36): the status continued. SQLite's tasks.status
-- has no CHECK (see 0003): nothing to change.
SELECT 1;

-- Child workflows. A task started by another as its child names its parent
-- and its position among the parent's children (both are in its
-- task_scheduled too). The row carries them so a fresh child's claim,
-- which rebuilds task_scheduled from the row, still knows whom its terminal
-- append reports to (child_finished, in the parent's log).
ALTER TABLE /* TEMPLATE: schema */tasks
    ADD COLUMN parent_id       uuid,
    ADD COLUMN parent_position integer CHECK (parent_position >= 0);

-- A parent's children, for the console's tree and operators' queries.
CREATE INDEX tasks_parent_idx ON /* TEMPLATE: schema */tasks (parent_id) WHERE parent_id IS NOT NULL;

-- Child workflows: as PostgreSQL's 0009_children. A child's row names its
-- parent and its position among the parent's children.
ALTER TABLE tasks ADD COLUMN parent_id TEXT;
ALTER TABLE tasks ADD COLUMN parent_position INTEGER CHECK (parent_position >= 0);

CREATE INDEX tasks_parent_idx ON tasks (parent_id) WHERE parent_id IS NOT NULL;

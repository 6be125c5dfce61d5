-- Signals a task type declares: as PostgreSQL's 0022_signal_declarations
-- (JSON text; NULL: none declared).
ALTER TABLE task_types ADD COLUMN signals TEXT;

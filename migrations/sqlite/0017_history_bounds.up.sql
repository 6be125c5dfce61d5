-- History bounds: as PostgreSQL's 0017_history_bounds (the lengths are of
-- the stored text). The expressions of the indexes are the ones the
-- store's statements use, as SQLite requires.
ALTER TABLE tasks ADD COLUMN history_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET history_bytes = coalesce((
    SELECT sum(length(CAST(e.data AS BLOB))) FROM events AS e
    WHERE e.task_id = tasks.id AND e.seq > 1 AND e.type <> 'attempt_started'), 0);

CREATE INDEX events_signal_dedup ON events (task_id, json_extract(data, '$.dedup_id'))
    WHERE type = 'signal_received';
CREATE INDEX events_signal_name ON events (task_id, json_extract(data, '$.name'), seq)
    WHERE type = 'signal_received';
CREATE INDEX events_waits ON events (task_id, seq)
    WHERE type IN ('wait_started', 'wait_timed_out');

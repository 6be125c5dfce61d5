-- Audit queries read the events of a time range. SQLite has no BRIN: a
-- B-tree on the time.
CREATE INDEX events_at_idx ON events (at);

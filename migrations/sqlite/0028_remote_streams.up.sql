-- Remote steps' streams: as PostgreSQL's 0028_remote_streams.
ALTER TABLE remote_steps ADD COLUMN stream_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE remote_steps ADD COLUMN stream_names TEXT NOT NULL DEFAULT '[]'; -- a JSON array

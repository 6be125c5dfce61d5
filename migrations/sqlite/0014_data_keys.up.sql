-- Encryption at rest: as PostgreSQL's 0014_data_keys.
ALTER TABLE tasks ADD COLUMN data_key BLOB;

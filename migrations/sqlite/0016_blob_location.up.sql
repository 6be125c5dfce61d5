-- Blob stores: as PostgreSQL's 0016_blob_location.
ALTER TABLE blobs ADD COLUMN location TEXT;

-- Blob stores (issue 20): a blob whose bytes are kept in a directory or an
-- S3-compatible bucket instead of this table; its row names the location
-- (file:///dir, s3://bucket/prefix?endpoint=…) and holds no data.
ALTER TABLE /* TEMPLATE: schema */blobs ADD COLUMN location text;

-- Archival: as PostgreSQL's 0012_archive.
ALTER TABLE namespaces ADD COLUMN archive TEXT;

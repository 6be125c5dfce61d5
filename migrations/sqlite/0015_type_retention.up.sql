-- Retention per task type: as PostgreSQL's 0015_type_retention (JSON text).
ALTER TABLE namespaces ADD COLUMN type_retention TEXT;

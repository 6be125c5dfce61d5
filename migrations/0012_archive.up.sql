-- Archival (issue 20): where retention writes a namespace's histories
-- before it removes them (file:///dir or s3://bucket/prefix; credentials
-- never here). NULL: the default of the process that runs retention.
ALTER TABLE /* TEMPLATE: schema */namespaces ADD COLUMN archive text;

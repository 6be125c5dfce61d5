-- Retention per task type (issue 20): a namespace's types that keep their
-- finished tasks for another period than the namespace's, as JSON
-- {"<task type>": <milliseconds>}.
ALTER TABLE /* TEMPLATE: schema */namespaces ADD COLUMN type_retention jsonb;

-- The task types workers have registered, per namespace.
CREATE TABLE task_types (
    namespace            TEXT    NOT NULL,
    type                 TEXT    NOT NULL,
    version              INTEGER NOT NULL CHECK (version > 0),
    queue                TEXT    NOT NULL,
    max_attempts         INTEGER NOT NULL CHECK (max_attempts >= 0),
    schedule_to_close_ms INTEGER CHECK (schedule_to_close_ms > 0),
    registered_by        TEXT    NOT NULL,
    registered_at        INTEGER NOT NULL,
    PRIMARY KEY (namespace, type, version)
);

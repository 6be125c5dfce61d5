-- name: TaskTypeRegister
-- Records the task types a worker serves, with their defaults and the
-- signals they declare; a type registered again takes the latest worker's.
INSERT INTO /* TEMPLATE: schema */task_types AS tt
    (namespace, type, version, queue, max_attempts, schedule_to_close_ms, signals, registered_by, registered_at)
SELECT @namespace, t.type, t.version, t.queue, t.max_attempts, t.schedule_to_close_ms, t.signals::jsonb, @registered_by, now()
FROM unnest(@types::text[], @versions::integer[], @queues::text[], @max_attempts::integer[], @schedule_to_close_ms::bigint[],
        @signals::text[])
    AS t(type, version, queue, max_attempts, schedule_to_close_ms, signals)
ON CONFLICT (namespace, type, version) DO UPDATE SET
    queue = excluded.queue, max_attempts = excluded.max_attempts,
    schedule_to_close_ms = excluded.schedule_to_close_ms, signals = excluded.signals,
    registered_by = excluded.registered_by, registered_at = excluded.registered_at;

-- name: TaskTypeList
SELECT namespace, type, version, queue, max_attempts, schedule_to_close_ms, registered_by, registered_at, signals
FROM /* TEMPLATE: schema */task_types
WHERE namespace = @namespace
ORDER BY type, version;

-- History bounds (issue 33, F5). history_bytes is the running total of the
-- event data appended to a task after its start (attempt_started
-- excepted), which bounds what signals may add (store.HistoryLimits); an
-- append adds its events' lengths in the statement that writes them.
-- Histories written before are counted once here, by their text.
ALTER TABLE /* TEMPLATE: schema */tasks ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0;
UPDATE /* TEMPLATE: schema */tasks AS t SET history_bytes = s.bytes
FROM (SELECT task_id, sum(octet_length(data::text)) AS bytes FROM /* TEMPLATE: schema */events
      WHERE seq > 1 AND type <> 'attempt_started' GROUP BY task_id) AS s
WHERE t.id = s.task_id;

-- A signal is decided from the task's row and these indexes, not from its
-- whole history: whether its dedup id was seen, and whether the wait the
-- task is in has ended (the last wait_started or wait_timed_out, and a
-- signal of the wait's name after it). Partial: only these events are
-- indexed.
CREATE INDEX events_signal_dedup ON /* TEMPLATE: schema */events (task_id, (data ->> 'dedup_id'))
    WHERE type = 'signal_received';
CREATE INDEX events_signal_name ON /* TEMPLATE: schema */events (task_id, (data ->> 'name'), seq)
    WHERE type = 'signal_received';
CREATE INDEX events_waits ON /* TEMPLATE: schema */events (task_id, seq)
    WHERE type IN ('wait_started', 'wait_timed_out');

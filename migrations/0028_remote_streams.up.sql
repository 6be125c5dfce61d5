-- Remote steps' streams (issue 40): a worker writes stream chunks under
-- its claim, as a Go step writes through activities.Stream. What the
-- claim has written bounds it: the bytes of the chunks' JSON
-- (store.MaxRemoteStreamBytes) and the streams' names
-- (history.MaxStreams); a new claim starts again from none.
ALTER TABLE /* TEMPLATE: schema */remote_steps
    ADD COLUMN stream_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN stream_names text[] NOT NULL DEFAULT '{}';

-- Remote steps' streams (issue 40): a worker writes stream chunks under
-- its claim, as a Go step writes through activities.Stream. What the
-- claim has written, in bytes of the chunks' JSON, bounds it
-- (store.MaxRemoteStreamBytes); a new claim starts again from 0.
ALTER TABLE /* TEMPLATE: schema */remote_steps ADD COLUMN stream_bytes bigint NOT NULL DEFAULT 0;

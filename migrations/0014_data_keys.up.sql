-- Encryption at rest (issue 20): a task's data key, wrapped by a namespace
-- key (engine.Codec), kept on its row from the insert on. Erasing the task
-- sets it to NULL (crypto-shredding): every payload sealed with it is then
-- unreadable for good, while the events stay. The key is never in the
-- events, so an append-only log can still be shredded; retention removes
-- it with the row.
ALTER TABLE /* TEMPLATE: schema */tasks ADD COLUMN data_key bytea;

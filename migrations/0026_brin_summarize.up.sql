-- The leader summarizes events_at_brin_idx's new page ranges at its
-- passes (store.IndexSummarize) instead of autosummarize's requests to
-- autovacuum: those go to a queue of 256 work items shared by the whole
-- server, processed only when an autovacuum worker finishes in the
-- database. At a steady rate of appends it filled, and every request
-- refused logged a line and the appending statement (3,458 of them in a
-- drain of 100,000 tasks beside a million finished, with autovacuum off).
ALTER INDEX /* TEMPLATE: schema */events_at_brin_idx SET (autosummarize = off);

-- brin_summarize_new_values is the index owner's to call; the
-- application's role (docs/deployment.md: it only reads and writes rows)
-- calls it through this function, which runs as the owner and does
-- nothing else.
CREATE FUNCTION /* TEMPLATE: schema */summarize_event_ranges() RETURNS integer
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$ SELECT brin_summarize_new_values('/* TEMPLATE: schema */events_at_brin_idx'::regclass) $$;

-- Audit queries (Store.EventScan) read the events of a time range. Events
-- are appended roughly in time order, so a BRIN index on their time is a
-- summary of each block range (its least and greatest time): a few pages for
-- millions of events, and almost nothing to maintain on the hottest table,
-- where a B-tree would cost a write per event.
--
-- pages_per_range 32 (the default is 128): a range then holds about as
-- many events as one audit page reads (around a thousand), so a page's scan
-- reads little beyond its window. autosummarize: a range that fills is
-- summarized by autovacuum soon after, not at the next vacuum of the table;
-- a range not yet summarized matches every query and is read by each.
--
-- Built in the migration's transaction (CONCURRENTLY cannot run in one): one
-- sequential read of events, during which appends wait.
CREATE INDEX events_at_brin_idx
    ON /* TEMPLATE: schema */events USING brin (at)
    WITH (pages_per_range = 32, autosummarize = on);

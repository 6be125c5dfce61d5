-- PostgreSQL's 0026 turns off autosummarize of its BRIN index of event
-- times; SQLite has a B-tree there (0006), which needs no summaries.
SELECT 1;

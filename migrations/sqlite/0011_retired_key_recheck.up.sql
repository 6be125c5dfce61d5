-- PostgreSQL's 0011 adds the re-check a start runs after its insert, for a
-- removal that committed while the insert waited. SQLite runs one writer at
-- a time, so a start and a removal never overlap: nothing to add.
SELECT 1;

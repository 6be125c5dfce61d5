-- Moving a namespace between cells is PostgreSQL's alone (cells are
-- PostgreSQL clusters); this migration keeps step with its 0029.
SELECT 1;

-- Reserved: see the PostgreSQL twin.
SELECT 1;

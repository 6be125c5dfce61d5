-- Reserved: version 18 is another change's, in flight when
-- continue-as-new (0019) was written. This no-op keeps the versions
-- without a gap until it lands; it is then replaced by that change.
SELECT 1 FROM /* TEMPLATE: schema */tasks LIMIT 0;

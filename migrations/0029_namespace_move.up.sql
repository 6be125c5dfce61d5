-- Moving a namespace between cells (cairn namespace move, issue 41): the
-- source cell refuses the namespace's new tasks and claims from the moment
-- the move begins, through triggers the move creates on tasks, one pair
-- per moved namespace (WHEN compares the namespace to a constant, so the
-- other namespaces pay for no call). They stay after the move, so a
-- process still on the old placement map is told where the namespace
-- went (SQLSTATE CRN02) rather than writing where nobody looks.
CREATE FUNCTION /* TEMPLATE: schema */refuse_moved_namespace() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'namespace % has moved to cell % (cairn namespace move): use a placement map that places it there', NEW.namespace, TG_ARGV[0]
        USING ERRCODE = 'CRN02';
END
$$;

-- A start re-checks, after its insert, that no key it took was retired
-- meanwhile (issue 20). The insert's snapshot is taken when it begins: a
-- removal committing while the insert waits on the row it deletes retires
-- the key unseen, and the insert then goes in. This function runs as the
-- next statement of the start's transaction, with a snapshot that sees the
-- removal, and refuses the start (SQLSTATE CRN01), which the store then
-- runs again: the second try finds the retired key and answers with the
-- removed task's id.
CREATE FUNCTION /* TEMPLATE: schema */refuse_retired_keys(ids uuid[], at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM /* TEMPLATE: schema */tasks AS t
               JOIN /* TEMPLATE: schema */retired_keys AS r
                 ON r.namespace = t.namespace AND r.idempotency_key = t.idempotency_key
               WHERE t.id = ANY(ids) AND r.expires_at > at) THEN
        RAISE EXCEPTION 'cairn: an idempotency key of this start was retired while it ran'
            USING ERRCODE = 'CRN01';
    END IF;
    RETURN true;
END
$$;

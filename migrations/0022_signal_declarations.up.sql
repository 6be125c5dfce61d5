-- Signals checked at the edge (issue 37): the signals a task type at a
-- version declares it receives, as JSON {"<signal name>": <JSON Schema of
-- its payload>}. NULL: the type declares none, and any signal is taken as
-- before. Workers write it with their types; clients read it to refuse a
-- signal of an undeclared name or a payload that does not fit.
ALTER TABLE /* TEMPLATE: schema */task_types ADD COLUMN signals jsonb;

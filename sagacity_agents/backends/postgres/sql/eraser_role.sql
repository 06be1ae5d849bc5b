-- The eraser role (docs/sensitive-data.md): the one role that may destroy a saga's data key
-- (crypto-shredding: its sensitive values become unrecoverable) and rewrap the keys when the
-- master key is rotated. Run as the owner of the tables, after `sagacity db migrate`:
--     psql URI -v app_role=ROLE -v schema=SCHEMA -f eraser_role.sql
-- or let `sagacity db grant ROLE --eraser [--schema SCHEMA]` print them (`--apply` runs them).
-- It reads the journal and appends to it (the DATA_ERASED entry of the access log), deletes data
-- keys and inserts their tombstones, updates them for a rotation; it may not change or delete a
-- journal row. Give it to an operator's role, not to the application's.
GRANT USAGE ON SCHEMA :"schema" TO :"app_role";
GRANT SELECT ON :"schema".sagacity_schema_migrations TO :"app_role";
GRANT SELECT, INSERT ON :"schema".sagacity_journal TO :"app_role";
GRANT SELECT ON :"schema".sagacity_journal_meta TO :"app_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".sagacity_data_keys TO :"app_role";

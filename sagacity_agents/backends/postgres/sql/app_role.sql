-- Least privilege for the application's role (docs/postgres.md). Run as the owner of the tables,
-- after `sagacity db migrate`, with psql naming the role and the tables' schema:
--     psql URI -v app_role=ROLE -v schema=SCHEMA -f app_role.sql
-- or let `sagacity db grant ROLE [--schema SCHEMA]` print them filled in (`--apply` runs them).
-- :"app_role" and :"schema" are psql variables, quoted as identifiers when substituted; no table
-- name contains them, so no search-and-replace can rename a table by mistake.
-- The journal is append-only for the application: SELECT and INSERT, no UPDATE, no DELETE, so
-- editing evidence needs another role, a barrier the hash chain alone is not. Approval requests
-- are working state: the application records decisions and consumes them (UPDATE) but never
-- deletes them; snapshots of paused runs are replaced and removed. Data keys (wrapped) are added
-- and read, never deleted or changed: an erasure takes the eraser role (eraser_role.sql).
GRANT USAGE ON SCHEMA :"schema" TO :"app_role";
GRANT SELECT ON :"schema".sagacity_schema_migrations TO :"app_role";
GRANT SELECT, INSERT ON :"schema".sagacity_journal TO :"app_role";
GRANT SELECT ON :"schema".sagacity_journal_meta TO :"app_role";
GRANT SELECT, INSERT, UPDATE ON :"schema".sagacity_approval_requests TO :"app_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".sagacity_snapshots TO :"app_role";
GRANT SELECT, INSERT ON :"schema".sagacity_data_keys TO :"app_role";

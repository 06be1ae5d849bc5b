-- Least privilege for the application's role (docs/postgres.md). Run as the owner of the tables,
-- after `sagacity db migrate`; replace sagacity_app with your role and public with your schema.
-- The journal is append-only for the application: SELECT and INSERT, no UPDATE, no DELETE, so
-- editing evidence needs another role, a barrier the hash chain alone is not. Approval requests
-- are working state: the application records decisions and consumes them (UPDATE) but never
-- deletes them; snapshots of paused runs are replaced and removed.
GRANT USAGE ON SCHEMA public TO sagacity_app;
GRANT SELECT ON sagacity_schema_migrations TO sagacity_app;
GRANT SELECT, INSERT ON sagacity_journal TO sagacity_app;
GRANT SELECT, INSERT, UPDATE ON sagacity_approval_requests TO sagacity_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON sagacity_snapshots TO sagacity_app;

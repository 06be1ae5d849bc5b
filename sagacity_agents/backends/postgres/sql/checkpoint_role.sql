-- Least privilege on the signed-checkpoint schema (docs/postgres.md). Run as the owner of the
-- schema, after `sagacity db migrate --checkpoints URI`; replace sagacity_app with the role the
-- application uses for checkpoints and sagacity_checkpoints with your checkpoint schema.
-- Append-only: SELECT and INSERT, no UPDATE, no DELETE, no TRUNCATE, so no writer can remove the
-- checkpoint that reveals a truncated or re-sealed journal. Grant nothing here to a role that
-- may rewrite the journal but should not sign (the signature needs the key anyway).
GRANT USAGE ON SCHEMA sagacity_checkpoints TO sagacity_app;
GRANT SELECT ON sagacity_checkpoints.sagacity_checkpoint_migrations TO sagacity_app;
GRANT SELECT, INSERT ON sagacity_checkpoints.sagacity_checkpoints TO sagacity_app;

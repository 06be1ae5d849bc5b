-- Least privilege on the signed-checkpoint schema (docs/postgres.md). Run as the owner of the
-- schema, after `sagacity db migrate --checkpoints URI`, with psql naming the role the
-- application uses for checkpoints and the checkpoint schema (default sagacity_checkpoints):
--     psql URI -v app_role=ROLE -v schema=sagacity_checkpoints -f checkpoint_role.sql
-- or let `sagacity db grant ROLE --checkpoints [--schema SCHEMA]` print them (`--apply` runs them).
-- Append-only: SELECT and INSERT, no UPDATE, no DELETE, no TRUNCATE, so no writer can remove the
-- checkpoint that reveals a truncated or re-sealed journal. Grant nothing here to a role that
-- may rewrite the journal but should not sign (the signature needs the key anyway).
GRANT USAGE ON SCHEMA :"schema" TO :"app_role";
GRANT SELECT ON :"schema".sagacity_checkpoint_migrations TO :"app_role";
GRANT SELECT, INSERT ON :"schema".sagacity_checkpoints TO :"app_role";

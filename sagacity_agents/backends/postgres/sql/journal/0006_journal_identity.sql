-- 0006: the journal's identity (core/identity.py). A random 128-bit id made with the schema, as
-- 32 lowercase hex digits, kept in a table of the journal's own facts (never a list of sagas).
-- Sagas opened from then on record it in their SAGA_OPENED and bind their idempotency keys and
-- entry tags to it, so the same saga id in two schemas (two tenants, staging and production)
-- never shares a key, and a saga copied into another schema fails verification naming both
-- ids. `sagacity journal new-id` gives a copy meant to become another journal a new id.
CREATE TABLE sagacity_journal_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO sagacity_journal_meta (key, value)
VALUES ('journal_id', replace(gen_random_uuid()::text, '-', ''));

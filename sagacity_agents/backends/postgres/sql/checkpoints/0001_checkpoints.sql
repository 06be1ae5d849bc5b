-- 0001: signed checkpoints (core/postgres_checkpoints.py). Applied with search_path set to the
-- checkpoint schema (default sagacity_checkpoints), never the journal's: the journal's writers
-- need no right here, and the application role gets SELECT and INSERT only
-- (core/sql/postgres_checkpoint_role.sql), so a stored checkpoint is never rewritten or removed.
-- One row per signed statement; every field as signed (signed_at is the fixed-width UTC text).
-- The UNIQUE constraint makes storing an identical checkpoint again (a retried put) a no-op.
CREATE TABLE sagacity_checkpoints (
    id        bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- storage order
    saga_id   text    NOT NULL,
    seq       bigint  NOT NULL CHECK (seq >= 1),
    hash      text    NOT NULL,
    signed_at text    NOT NULL,
    key_id    text    NOT NULL,
    signature text    NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sagacity_checkpoints_identical
        UNIQUE (saga_id, seq, hash, signed_at, key_id, signature)
);

-- 0001: the journal, approval requests and run snapshots.
-- The canonical bytes are stored as they were hashed (bytea, never jsonb: jsonb reorders keys and
-- drops duplicates); recorded_at is the fixed-width UTC text that was hashed. Phases are text with
-- no CHECK: a new phase needs no migration, and verification checks every column against the bytes.
CREATE TABLE sagacity_journal (
    id          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- storage order: sagas list oldest first
    saga_id     text    NOT NULL,
    seq         bigint  NOT NULL CHECK (seq >= 1),
    phase       text    NOT NULL,
    tool        text,
    call_id     text,
    write_key   text    NOT NULL,
    recorded_at text    NOT NULL,
    prev_hash   text    NOT NULL,
    hash        text    NOT NULL,
    canonical   bytea   NOT NULL,
    CONSTRAINT sagacity_journal_saga_seq UNIQUE (saga_id, seq),
    CONSTRAINT sagacity_journal_saga_write_key UNIQUE (saga_id, write_key)
);

-- Working state of approvals (not evidence; the journal is). Same columns as the SQLite store.
CREATE TABLE sagacity_approval_requests (
    id          bigint  GENERATED ALWAYS AS IDENTITY UNIQUE,       -- ties on created_at: insertion order
    request_id  text    PRIMARY KEY,
    saga_id     text    NOT NULL,
    call_id     text,
    tool        text    NOT NULL,
    args        text    NOT NULL,     -- RFC 8785 text of the canonical validated arguments
    raw_args    text,
    args_hash   text    NOT NULL,     -- SHA-256 hex of exactly the UTF-8 bytes of "args"
    created_at  text    NOT NULL,     -- fixed-width UTC, so text order is time order
    expires_at  text,
    decision    text    CHECK (decision IS NULL OR decision IN ('approved', 'rejected')),
    approver    text,
    reason      text,
    decided_at  text,
    consumed_at text
);
CREATE INDEX sagacity_approval_requests_saga ON sagacity_approval_requests (saga_id, created_at);

CREATE TABLE sagacity_snapshots (
    saga_id  text PRIMARY KEY,
    snapshot text NOT NULL            -- serialized run state, application context stripped
);

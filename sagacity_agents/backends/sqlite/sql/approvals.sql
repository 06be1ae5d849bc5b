-- Approval store schema for SQLite. Working state, not evidence: nothing here is hash-chained
-- (the journal holds what was proposed, decided and executed). The tables may live in the same
-- file as the journal; their names do not collide with it.
CREATE TABLE IF NOT EXISTS sagacity_approval_requests (
    request_id  TEXT PRIMARY KEY,
    saga_id     TEXT NOT NULL,
    call_id     TEXT,
    tool        TEXT NOT NULL,
    args        TEXT NOT NULL,            -- RFC 8785 text of the canonical validated arguments
    raw_args    TEXT,
    args_hash   TEXT NOT NULL,            -- SHA-256 hex of exactly the bytes in "args"
    created_at  TEXT NOT NULL,            -- fixed-width UTC, so text order is time order
    expires_at  TEXT,                     -- NULL: never expires
    decision    TEXT CHECK (decision IS NULL OR decision IN ('approved', 'rejected')),
    approver    TEXT,
    reason      TEXT,
    decided_at  TEXT,
    consumed_at TEXT,
    args_version INTEGER NOT NULL DEFAULT 1, -- 2: "args" hold commitments (core/approval_args.py)
    args_sealed TEXT                      -- the clear arguments sealed under the saga's data key
);
CREATE INDEX IF NOT EXISTS sagacity_approval_requests_saga
    ON sagacity_approval_requests (saga_id, created_at);
CREATE TABLE IF NOT EXISTS sagacity_snapshots (
    saga_id  TEXT PRIMARY KEY,
    snapshot TEXT NOT NULL                -- serialized run state, application context stripped
);

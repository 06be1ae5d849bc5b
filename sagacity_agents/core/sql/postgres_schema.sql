-- The whole PostgreSQL schema at the latest migration, in one file. Never applied by the library
-- (`sagacity db migrate` applies core/sql/postgres/NNNN_*.sql); a test checks that applying every
-- migration gives exactly this schema, so a migration cannot drift from the documented design.
CREATE TABLE sagacity_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sagacity_journal (
    id          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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

CREATE TABLE sagacity_approval_requests (
    id          bigint  GENERATED ALWAYS AS IDENTITY UNIQUE,
    request_id  text    PRIMARY KEY,
    saga_id     text    NOT NULL,
    call_id     text,
    tool        text    NOT NULL,
    args        text    NOT NULL,
    raw_args    text,
    args_hash   text    NOT NULL,
    created_at  text    NOT NULL,
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
    snapshot text NOT NULL
);

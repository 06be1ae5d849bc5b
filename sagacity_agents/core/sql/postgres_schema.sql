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

-- One append, ordered and sealed under the saga's lock, the lock released before the WAL flush
-- (see core/postgres_journal.py). The client sends the entry's canonical bytes split around
-- prev_hash and seq. The procedure takes the saga's transaction-scoped advisory lock, reads the
-- tail (in READ COMMITTED each statement takes a fresh snapshot, so this read sees every append
-- committed before the lock was granted), joins the bytes around the real tail and inserts them
-- with their SHA-256; that transaction commits without waiting for the flush, which releases the
-- lock at once. Then, when p_durable, a second transaction writes a WAL record and commits
-- synchronously: CALL returns only once the WAL is flushed past the append (concurrent appenders
-- share flushes). WAL is written in order, so an entry someone chained onto is never lost while the
-- later one survives. The OUT values stay NULL when the write key is already used (the client then
-- reads that row; the flush still covers it). Call it outside a transaction block.
CREATE PROCEDURE sagacity_append(
    p_saga_id text, p_phase text, p_tool text, p_call_id text, p_write_key text,
    p_recorded_at text, p_genesis text, p_head bytea, p_middle bytea, p_tail bytea,
    p_durable boolean,
    INOUT o_seq bigint DEFAULT NULL, INOUT o_prev_hash text DEFAULT NULL,
    INOUT o_hash text DEFAULT NULL, INOUT o_canonical bytea DEFAULT NULL
)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    WITH tail AS (
        SELECT j.seq, j.hash FROM sagacity_journal j
        WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1
    ), next AS (
        SELECT coalesce((SELECT t.seq FROM tail t), 0) + 1 AS seq,
               coalesce((SELECT t.hash FROM tail t), p_genesis) AS prev_hash
    ), sealed AS (
        SELECT n.seq, n.prev_hash,
               p_head || convert_to(n.prev_hash, 'UTF8') || p_middle
                   || convert_to(n.seq::text, 'UTF8') || p_tail AS canonical
        FROM next n
    )
    INSERT INTO sagacity_journal AS ins
        (saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical)
    SELECT p_saga_id, s.seq, p_phase, p_tool, p_call_id, p_write_key, p_recorded_at,
           s.prev_hash, encode(sha256(s.canonical), 'hex'), s.canonical
    FROM sealed s
    WHERE NOT EXISTS (
        SELECT 1 FROM sagacity_journal k WHERE k.saga_id = p_saga_id AND k.write_key = p_write_key
    )
    RETURNING ins.seq, ins.prev_hash, ins.hash, ins.canonical
    INTO o_seq, o_prev_hash, o_hash, o_canonical;
    COMMIT;  -- not flushed yet: the lock is free for the next appender
    IF p_durable THEN
        -- A transaction that wrote WAL commits synchronously: it waits for the flush.
        PERFORM pg_logical_emit_message(true, 'sagacity', '');
    END IF;
END $$;

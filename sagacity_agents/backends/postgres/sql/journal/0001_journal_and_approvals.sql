-- 0001: the journal, approval requests and run snapshots.
-- The canonical bytes are stored as they were hashed (bytea, never jsonb: jsonb reorders keys and
-- drops duplicates); recorded_at is the fixed-width UTC text that was hashed. Phases are text with
-- no CHECK: a new phase needs no migration, and verification checks every column against the bytes.
CREATE TABLE sagacity_journal (
    id          bigint  GENERATED ALWAYS AS IDENTITY,  -- storage order (sagas list oldest first); no index: one fewer per append
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
    CONSTRAINT sagacity_journal_saga_seq PRIMARY KEY (saga_id, seq),
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

-- One append, ordered and sealed under the saga's lock, the lock released before the WAL flush
-- (see core/postgres_journal.py). The client sends the entry's canonical bytes split around
-- prev_hash and seq, and what the shared append rule (core/journal.py) refuses: p_terminal, the
-- phases nothing may follow, and p_expected_seq, the seq the saga must end at (NULL: any). Under
-- the saga's transaction-scoped advisory lock (in READ COMMITTED every statement takes a fresh
-- snapshot, so these reads see every append committed before the lock was granted):
--   o_status 'exists'   the write key is already stored: nothing inserted (the client reads it);
--   o_status 'refused'  the tail breaks a rule: nothing inserted, the tail returned (the client
--                       applies the shared rule to it and raises its error);
--   o_status 'inserted' the bytes joined around the real tail, stored with their SHA-256.
-- When the lock was free, that transaction commits synchronously (one commit, durable). When
-- other appenders hold or wait for it, the transaction commits without waiting for the flush,
-- which hands the lock on at once; then a second transaction writes a WAL record and commits
-- synchronously, so CALL still returns only once the WAL is flushed past the append (queued
-- appenders share flushes). WAL is written in order, so an entry someone chained onto is never
-- lost while the later one survives. p_durable = false (fast outcomes): no wait for the flush at
-- all. Call it outside a transaction block.
CREATE PROCEDURE sagacity_append(
    p_saga_id text, p_phase text, p_tool text, p_call_id text, p_write_key text,
    p_recorded_at text, p_genesis text, p_head bytea, p_middle bytea, p_tail bytea,
    p_durable boolean, p_expected_seq bigint, p_terminal text[],
    INOUT o_status text DEFAULT NULL,
    INOUT o_seq bigint DEFAULT NULL, INOUT o_prev_hash text DEFAULT NULL,
    INOUT o_hash text DEFAULT NULL, INOUT o_canonical bytea DEFAULT NULL,
    INOUT o_tail_phase text DEFAULT NULL
)
LANGUAGE plpgsql AS $$
DECLARE
    tail_seq bigint;
    tail_hash text;
    contended boolean;
BEGIN
    contended := NOT pg_try_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    IF contended THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    END IF;
    IF contended OR NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF EXISTS (SELECT 1 FROM sagacity_journal k
               WHERE k.saga_id = p_saga_id AND k.write_key = p_write_key) THEN
        o_status := 'exists';
    ELSE
        SELECT j.seq, j.hash, j.phase INTO tail_seq, tail_hash, o_tail_phase
        FROM sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
        o_seq := coalesce(tail_seq, 0) + 1;
        o_prev_hash := coalesce(tail_hash, p_genesis);
        IF o_tail_phase = ANY (p_terminal)
           OR (p_expected_seq IS NOT NULL AND p_expected_seq <> o_seq - 1) THEN
            o_status := 'refused';
        ELSE
            o_canonical := p_head || convert_to(o_prev_hash, 'UTF8') || p_middle
                || convert_to(o_seq::text, 'UTF8') || p_tail;
            o_hash := encode(sha256(o_canonical), 'hex');
            INSERT INTO sagacity_journal
                (saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash,
                 canonical)
            VALUES (p_saga_id, o_seq, p_phase, p_tool, p_call_id, p_write_key, p_recorded_at,
                    o_prev_hash, o_hash, o_canonical);
            o_status := 'inserted';
        END IF;
    END IF;
    COMMIT;  -- contended: not flushed yet, the lock is free for the next appender
    IF p_durable AND (contended OR o_status <> 'inserted') THEN
        -- A transaction that wrote WAL commits synchronously: it waits for the flush.
        PERFORM pg_logical_emit_message(true, 'sagacity', '');
    END IF;
END $$;

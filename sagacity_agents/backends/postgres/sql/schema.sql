-- The whole PostgreSQL schema at the latest migration, in one file. Never applied by the library
-- (`sagacity db migrate` applies backends/postgres/sql/journal/NNNN_*.sql); a test checks that applying every
-- migration gives exactly this schema, so a migration cannot drift from the documented design.
CREATE TABLE sagacity_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

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
    tag_key     text,                                   -- issue 19: the key whose tag authenticates the entry
    tag         text,                                   -- Ed25519 (base64) over the content without chain links
    sealed      bytea,                                  -- its sensitive values, encrypted (0007); NULL: none
    CONSTRAINT sagacity_journal_saga_seq PRIMARY KEY (saga_id, seq),
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
    consumed_at text,
    args_version integer NOT NULL DEFAULT 1,
    args_sealed text
);
CREATE INDEX sagacity_approval_requests_saga ON sagacity_approval_requests (saga_id, created_at);

CREATE TABLE sagacity_snapshots (
    saga_id  text PRIMARY KEY,
    snapshot text NOT NULL
);

-- One append, ordered and sealed under the saga's lock, the lock released before the WAL flush
-- (see backends/postgres/journal.py). The client sends the entry's canonical bytes split around
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

-- 0002: the append as one statement (see the migration for the contract); the procedure above
-- stays for workers of the previous release during an upgrade.
CREATE FUNCTION sagacity_append_entry(
    p_saga_id text, p_phase text, p_tool text, p_call_id text, p_write_key text,
    p_recorded_at text, p_genesis text, p_head bytea, p_middle bytea, p_tail bytea,
    p_durable boolean, p_expected_seq bigint, p_terminal text[], p_after_key text,
    OUT o_status text, OUT o_seq bigint, OUT o_prev_hash text, OUT o_hash text,
    OUT o_tail_phase text
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    contended boolean;
BEGIN
    contended := NOT pg_try_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    IF contended THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    END IF;
    IF contended OR NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO sagacity_journal
        (saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical)
    SELECT p_saga_id, n.seq, p_phase, p_tool, p_call_id, p_write_key, p_recorded_at, n.prev,
           encode(sha256(n.bytes), 'hex'), n.bytes
    FROM (SELECT coalesce(t.seq, 0) + 1 AS seq, coalesce(t.hash, p_genesis) AS prev, t.phase,
                 p_head || convert_to(coalesce(t.hash, p_genesis), 'UTF8') || p_middle
                 || convert_to((coalesce(t.seq, 0) + 1)::text, 'UTF8') || p_tail AS bytes
          FROM (SELECT 1) one LEFT JOIN LATERAL (
              SELECT j.seq, j.hash, j.phase FROM sagacity_journal j
              WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1) t ON true) n
    WHERE (n.phase IS NULL OR n.phase <> ALL (p_terminal))
      AND (p_expected_seq IS NULL OR p_expected_seq = n.seq - 1)
      AND (p_after_key IS NULL OR current_setting('sagacity.inserted', true) = p_after_key)
    ON CONFLICT ON CONSTRAINT sagacity_journal_saga_write_key DO NOTHING
    RETURNING seq, prev_hash, hash INTO o_seq, o_prev_hash, o_hash;
    IF FOUND THEN
        PERFORM set_config('sagacity.inserted', p_write_key, true);  -- for the batch's next append
        o_status := CASE WHEN contended AND p_durable THEN 'unflushed' ELSE 'inserted' END;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM sagacity_journal k
               WHERE k.saga_id = p_saga_id AND k.write_key = p_write_key) THEN
        o_status := 'exists';
        RETURN;
    END IF;
    SELECT j.seq + 1, j.hash, j.phase INTO o_seq, o_prev_hash, o_tail_phase
    FROM sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        o_seq := 1;
        o_prev_hash := p_genesis;
    END IF;
    o_status := 'refused';
END $$;

-- Fencing tokens (0003) (design.md, "Fencing"; backends/postgres/journal.py). The append function
-- of 0002 with one more argument, p_fence: the seq of the RUN_STARTED whose run lease the writer
-- holds (NULL: an unfenced append). The entry is inserted only while that RUN_STARTED is the
-- saga's newest, read under the saga's advisory lock in the same statement as the insert, so a
-- run that lost its lease (another run took the saga over while it stalled) writes nothing. On
-- refusal o_lease returns the newest RUN_STARTED at or after p_fence (NULL: none), and the client
-- applies the shared rule (core.journal.next_entry), which raises LeaseLostError. The sole
-- writer's plain INSERT needs no change: it lands only on the tail its journal stored last
-- (UNIQUE (saga_id, seq)), so a takeover's RUN_STARTED after that tail refuses it, and the client
-- sends it alone only under the lease it last saw stored. 0002's function stays for workers of
-- the previous release during an upgrade (their appends are unfenced).
CREATE FUNCTION sagacity_append_fenced(
    p_saga_id text, p_phase text, p_tool text, p_call_id text, p_write_key text,
    p_recorded_at text, p_genesis text, p_head bytea, p_middle bytea, p_tail bytea,
    p_durable boolean, p_expected_seq bigint, p_terminal text[], p_after_key text,
    p_fence bigint,
    OUT o_status text, OUT o_seq bigint, OUT o_prev_hash text, OUT o_hash text,
    OUT o_tail_phase text, OUT o_lease bigint
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    contended boolean;
BEGIN
    contended := NOT pg_try_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    IF contended THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    END IF;
    IF contended OR NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO sagacity_journal
        (saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical)
    SELECT p_saga_id, n.seq, p_phase, p_tool, p_call_id, p_write_key, p_recorded_at, n.prev,
           encode(sha256(n.bytes), 'hex'), n.bytes
    FROM (SELECT coalesce(t.seq, 0) + 1 AS seq, coalesce(t.hash, p_genesis) AS prev, t.phase,
                 p_head || convert_to(coalesce(t.hash, p_genesis), 'UTF8') || p_middle
                 || convert_to((coalesce(t.seq, 0) + 1)::text, 'UTF8') || p_tail AS bytes
          FROM (SELECT 1) one LEFT JOIN LATERAL (
              SELECT j.seq, j.hash, j.phase FROM sagacity_journal j
              WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1) t ON true) n
    WHERE (n.phase IS NULL OR n.phase <> ALL (p_terminal))
      AND (p_expected_seq IS NULL OR p_expected_seq = n.seq - 1)
      AND (p_after_key IS NULL OR current_setting('sagacity.inserted', true) = p_after_key)
      AND (p_fence IS NULL OR p_fence = (
          SELECT max(r.seq) FROM sagacity_journal r
          WHERE r.saga_id = p_saga_id AND r.seq >= p_fence AND r.phase = 'RUN_STARTED'))
    ON CONFLICT ON CONSTRAINT sagacity_journal_saga_write_key DO NOTHING
    RETURNING seq, prev_hash, hash INTO o_seq, o_prev_hash, o_hash;
    IF FOUND THEN
        PERFORM set_config('sagacity.inserted', p_write_key, true);  -- for the batch's next append
        o_status := CASE WHEN contended AND p_durable THEN 'unflushed' ELSE 'inserted' END;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM sagacity_journal k
               WHERE k.saga_id = p_saga_id AND k.write_key = p_write_key) THEN
        o_status := 'exists';
        RETURN;
    END IF;
    SELECT j.seq + 1, j.hash, j.phase INTO o_seq, o_prev_hash, o_tail_phase
    FROM sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        o_seq := 1;
        o_prev_hash := p_genesis;
    END IF;
    IF p_fence IS NOT NULL THEN
        SELECT max(r.seq) INTO o_lease FROM sagacity_journal r
        WHERE r.saga_id = p_saga_id AND r.seq >= p_fence AND r.phase = 'RUN_STARTED';
    END IF;
    o_status := 'refused';
END $$;

-- 0004: the fenced append, storing the entry's tag (core/authenticity.py).
CREATE FUNCTION sagacity_append_tagged(
    p_saga_id text, p_phase text, p_tool text, p_call_id text, p_write_key text,
    p_recorded_at text, p_genesis text, p_head bytea, p_middle bytea, p_tail bytea,
    p_durable boolean, p_expected_seq bigint, p_terminal text[], p_after_key text,
    p_fence bigint, p_tag_key text, p_tag text,
    OUT o_status text, OUT o_seq bigint, OUT o_prev_hash text, OUT o_hash text,
    OUT o_tail_phase text, OUT o_lease bigint
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    contended boolean;
BEGIN
    contended := NOT pg_try_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    IF contended THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    END IF;
    IF contended OR NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO sagacity_journal
        (saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical,
         tag_key, tag)
    SELECT p_saga_id, n.seq, p_phase, p_tool, p_call_id, p_write_key, p_recorded_at, n.prev,
           encode(sha256(n.bytes), 'hex'), n.bytes, p_tag_key, p_tag
    FROM (SELECT coalesce(t.seq, 0) + 1 AS seq, coalesce(t.hash, p_genesis) AS prev, t.phase,
                 p_head || convert_to(coalesce(t.hash, p_genesis), 'UTF8') || p_middle
                 || convert_to((coalesce(t.seq, 0) + 1)::text, 'UTF8') || p_tail AS bytes
          FROM (SELECT 1) one LEFT JOIN LATERAL (
              SELECT j.seq, j.hash, j.phase FROM sagacity_journal j
              WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1) t ON true) n
    WHERE (n.phase IS NULL OR n.phase <> ALL (p_terminal))
      AND (p_expected_seq IS NULL OR p_expected_seq = n.seq - 1)
      AND (p_after_key IS NULL OR current_setting('sagacity.inserted', true) = p_after_key)
      AND (p_fence IS NULL OR p_fence = (
          SELECT max(r.seq) FROM sagacity_journal r
          WHERE r.saga_id = p_saga_id AND r.seq >= p_fence AND r.phase = 'RUN_STARTED'))
    ON CONFLICT ON CONSTRAINT sagacity_journal_saga_write_key DO NOTHING
    RETURNING seq, prev_hash, hash INTO o_seq, o_prev_hash, o_hash;
    IF FOUND THEN
        PERFORM set_config('sagacity.inserted', p_write_key, true);  -- for the batch's next append
        o_status := CASE WHEN contended AND p_durable THEN 'unflushed' ELSE 'inserted' END;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM sagacity_journal k
               WHERE k.saga_id = p_saga_id AND k.write_key = p_write_key) THEN
        o_status := 'exists';
        RETURN;
    END IF;
    SELECT j.seq + 1, j.hash, j.phase INTO o_seq, o_prev_hash, o_tail_phase
    FROM sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        o_seq := 1;
        o_prev_hash := p_genesis;
    END IF;
    IF p_fence IS NOT NULL THEN
        SELECT max(r.seq) INTO o_lease FROM sagacity_journal r
        WHERE r.saga_id = p_saga_id AND r.seq >= p_fence AND r.phase = 'RUN_STARTED';
    END IF;
    o_status := 'refused';
END $$;

-- 0005: the append function of 0004 with the one entry a closed saga accepts (a late outcome
-- under its INTENT's fence).
CREATE FUNCTION sagacity_append_reopening(
    p_saga_id text, p_phase text, p_tool text, p_call_id text, p_write_key text,
    p_recorded_at text, p_genesis text, p_head bytea, p_middle bytea, p_tail bytea,
    p_durable boolean, p_expected_seq bigint, p_terminal text[], p_after_key text,
    p_fence bigint, p_tag_key text, p_tag text, p_late_intent bigint, p_late_fence bigint,
    OUT o_status text, OUT o_seq bigint, OUT o_prev_hash text, OUT o_hash text,
    OUT o_tail_phase text, OUT o_lease bigint
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    contended boolean;
BEGIN
    contended := NOT pg_try_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    IF contended THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    END IF;
    IF contended OR NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO sagacity_journal
        (saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical,
         tag_key, tag)
    SELECT p_saga_id, n.seq, p_phase, p_tool, p_call_id, p_write_key, p_recorded_at, n.prev,
           encode(sha256(n.bytes), 'hex'), n.bytes, p_tag_key, p_tag
    FROM (SELECT coalesce(t.seq, 0) + 1 AS seq, coalesce(t.hash, p_genesis) AS prev, t.phase,
                 p_head || convert_to(coalesce(t.hash, p_genesis), 'UTF8') || p_middle
                 || convert_to((coalesce(t.seq, 0) + 1)::text, 'UTF8') || p_tail AS bytes
          FROM (SELECT 1) one LEFT JOIN LATERAL (
              SELECT j.seq, j.hash, j.phase FROM sagacity_journal j
              WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1) t ON true) n
    WHERE (n.phase IS NULL OR n.phase <> ALL (p_terminal) OR (
          p_late_intent IS NOT NULL AND p_late_fence IS NOT NULL AND EXISTS (
              SELECT 1 FROM sagacity_journal i
              WHERE i.saga_id = p_saga_id AND i.seq = p_late_intent AND i.phase = 'INTENT'
                AND jsonb_typeof(convert_from(i.canonical, 'UTF8')::jsonb #> '{payload,fence}') = 'number'
                AND convert_from(i.canonical, 'UTF8')::jsonb #>> '{payload,fence}' = p_late_fence::text)))
      AND (p_expected_seq IS NULL OR p_expected_seq = n.seq - 1)
      AND (p_after_key IS NULL OR current_setting('sagacity.inserted', true) = p_after_key)
      AND (p_fence IS NULL OR p_fence = (
          SELECT max(r.seq) FROM sagacity_journal r
          WHERE r.saga_id = p_saga_id AND r.seq >= p_fence AND r.phase = 'RUN_STARTED'))
    ON CONFLICT ON CONSTRAINT sagacity_journal_saga_write_key DO NOTHING
    RETURNING seq, prev_hash, hash INTO o_seq, o_prev_hash, o_hash;
    IF FOUND THEN
        PERFORM set_config('sagacity.inserted', p_write_key, true);  -- for the batch's next append
        o_status := CASE WHEN contended AND p_durable THEN 'unflushed' ELSE 'inserted' END;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM sagacity_journal k
               WHERE k.saga_id = p_saga_id AND k.write_key = p_write_key) THEN
        o_status := 'exists';
        RETURN;
    END IF;
    SELECT j.seq + 1, j.hash, j.phase INTO o_seq, o_prev_hash, o_tail_phase
    FROM sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        o_seq := 1;
        o_prev_hash := p_genesis;
    END IF;
    IF p_fence IS NOT NULL THEN
        SELECT max(r.seq) INTO o_lease FROM sagacity_journal r
        WHERE r.saga_id = p_saga_id AND r.seq >= p_fence AND r.phase = 'RUN_STARTED';
    END IF;
    o_status := 'refused';
END $$;

-- The journal's own facts: its random id (migration 0006, core/identity.py).
CREATE TABLE sagacity_journal_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO sagacity_journal_meta (key, value)
VALUES ('journal_id', replace(gen_random_uuid()::text, '-', ''));

-- Each saga's data key per generation, only ever WRAPPED; an erasure leaves a tombstone
-- (migration 0007, core/data_keys.py).
CREATE TABLE sagacity_data_keys (
    saga_id       text        NOT NULL,
    generation    integer     NOT NULL CHECK (generation >= 1),
    master_key_id text,
    wrapped       bytea,
    created_at    text        NOT NULL,
    erased_at     text,
    erased_by     text,
    reason        text,
    CONSTRAINT sagacity_data_keys_saga_generation PRIMARY KEY (saga_id, generation)
);

-- 0007: the append function of 0005, storing the entry's sealed values.
CREATE FUNCTION sagacity_append_sealed(
    p_saga_id text, p_phase text, p_tool text, p_call_id text, p_write_key text,
    p_recorded_at text, p_genesis text, p_head bytea, p_middle bytea, p_tail bytea,
    p_durable boolean, p_expected_seq bigint, p_terminal text[], p_after_key text,
    p_fence bigint, p_tag_key text, p_tag text, p_late_intent bigint, p_late_fence bigint,
    p_sealed bytea,
    OUT o_status text, OUT o_seq bigint, OUT o_prev_hash text, OUT o_hash text,
    OUT o_tail_phase text, OUT o_lease bigint
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    contended boolean;
BEGIN
    contended := NOT pg_try_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    IF contended THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_saga_id, 0));
    END IF;
    IF contended OR NOT p_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO sagacity_journal
        (saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical,
         tag_key, tag, sealed)
    SELECT p_saga_id, n.seq, p_phase, p_tool, p_call_id, p_write_key, p_recorded_at, n.prev,
           encode(sha256(n.bytes), 'hex'), n.bytes, p_tag_key, p_tag, p_sealed
    FROM (SELECT coalesce(t.seq, 0) + 1 AS seq, coalesce(t.hash, p_genesis) AS prev, t.phase,
                 p_head || convert_to(coalesce(t.hash, p_genesis), 'UTF8') || p_middle
                 || convert_to((coalesce(t.seq, 0) + 1)::text, 'UTF8') || p_tail AS bytes
          FROM (SELECT 1) one LEFT JOIN LATERAL (
              SELECT j.seq, j.hash, j.phase FROM sagacity_journal j
              WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1) t ON true) n
    WHERE (n.phase IS NULL OR n.phase <> ALL (p_terminal) OR (
          p_late_intent IS NOT NULL AND p_late_fence IS NOT NULL AND EXISTS (
              SELECT 1 FROM sagacity_journal i
              WHERE i.saga_id = p_saga_id AND i.seq = p_late_intent AND i.phase = 'INTENT'
                AND jsonb_typeof(convert_from(i.canonical, 'UTF8')::jsonb #> '{payload,fence}') = 'number'
                AND convert_from(i.canonical, 'UTF8')::jsonb #>> '{payload,fence}' = p_late_fence::text)))
      AND (p_expected_seq IS NULL OR p_expected_seq = n.seq - 1)
      AND (p_after_key IS NULL OR current_setting('sagacity.inserted', true) = p_after_key)
      AND (p_fence IS NULL OR p_fence = (
          SELECT max(r.seq) FROM sagacity_journal r
          WHERE r.saga_id = p_saga_id AND r.seq >= p_fence AND r.phase = 'RUN_STARTED'))
    ON CONFLICT ON CONSTRAINT sagacity_journal_saga_write_key DO NOTHING
    RETURNING seq, prev_hash, hash INTO o_seq, o_prev_hash, o_hash;
    IF FOUND THEN
        PERFORM set_config('sagacity.inserted', p_write_key, true);  -- for the batch's next append
        o_status := CASE WHEN contended AND p_durable THEN 'unflushed' ELSE 'inserted' END;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM sagacity_journal k
               WHERE k.saga_id = p_saga_id AND k.write_key = p_write_key) THEN
        o_status := 'exists';
        RETURN;
    END IF;
    SELECT j.seq + 1, j.hash, j.phase INTO o_seq, o_prev_hash, o_tail_phase
    FROM sagacity_journal j WHERE j.saga_id = p_saga_id ORDER BY j.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        o_seq := 1;
        o_prev_hash := p_genesis;
    END IF;
    IF p_fence IS NOT NULL THEN
        SELECT max(r.seq) INTO o_lease FROM sagacity_journal r
        WHERE r.saga_id = p_saga_id AND r.seq >= p_fence AND r.phase = 'RUN_STARTED';
    END IF;
    o_status := 'refused';
END $$;

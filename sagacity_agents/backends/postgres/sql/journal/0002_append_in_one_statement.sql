-- 0002: the append as one statement, `SELECT * FROM sagacity_append_entry(...)` (see
-- core/postgres_journal.py). A function runs in the caller's transaction, so it costs less than
-- 0001's procedure, whose COMMIT inside a CALL starts a second transaction on every append
-- (measured in bench/postgres_append.py and docs/postgres.md). Same contract: the client sends the
-- entry's canonical bytes split around prev_hash and seq, p_terminal (the phases nothing may
-- follow) and p_expected_seq (the seq the saga must end at; NULL: any). Under the saga's
-- transaction-scoped advisory lock, every statement of a VOLATILE function takes a fresh snapshot
-- in READ COMMITTED, so the tail read sees every append committed before the lock was granted:
--   o_status 'inserted'   the bytes joined around the real tail, stored with their SHA-256; the
--                         statement's commit makes them durable (unless p_durable is false)
--   o_status 'unflushed'  the same, but others queued for the lock: the transaction commits
--                         without waiting for the WAL flush, handing the lock on at once; the
--                         client then makes it durable with a second, synchronous commit that
--                         writes WAL (WAL is flushed in order, so the queued appenders share
--                         flushes and an entry someone chained onto is never lost while a later
--                         one survives)
--   o_status 'exists'     the write key is already stored: nothing inserted (the client reads it)
--   o_status 'refused'    the tail breaks a rule: nothing inserted, the tail returned (the client
--                         applies the shared rule to it and raises its error)
-- The common path is two statements: the lock, then one INSERT ... SELECT that reads the tail
-- (one index probe), joins the bytes, checks the rule in its WHERE clause (and p_after_key: set
-- on every append of a batch sent in one round trip, which runs as one transaction, but the
-- first: the write key of the append before it, which must have been inserted by this very
-- transaction, so that the batch stops at its first append that inserts nothing; the client
-- sends an append again on its own when the one before it was a retry of a stored write) and
-- lets the write-key constraint find a retry (ON CONFLICT DO NOTHING needs INSERT privilege only). Only when nothing
-- was inserted does it look further: the key first, so that a retry of an append that closed the
-- saga (or moved the seq a conditional append expected) still gets its stored entry back, then
-- the tail the rule refused.
-- 0001's procedure stays: workers still running the previous release keep appending through it
-- while the fleet is upgraded (both take the same lock, so they order with each other).
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

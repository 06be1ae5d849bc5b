-- 0005: a late outcome may follow SAGA_CLOSED (core/append_rule.py, "reopens"). The call's own
-- holder, stalled past its lease while a recovery took the saga over and closed it, journals
-- the outcome of the call it started (an effect is a fact): a closed saga accepts that one entry,
-- which reopens it for the next recovery, and nothing else. The append function of 0004 under a
-- new name (not an overload: a GRANT names it without its argument types), with two more
-- arguments: p_late_intent, the seq of the INTENT a late outcome of a call names (NULL for any
-- other append), and p_late_fence, the fence that outcome was written under. After a terminal
-- phase the entry is inserted only when that INTENT is stored with exactly that fence in its
-- payload (its canonical bytes read as JSON: the rare path, one row by primary key), under the
-- saga's advisory lock in the same statement as the insert. On refusal the client applies the
-- shared rule (next_entry), which raises JournalClosedError. 0004's function stays for workers
-- of the previous release during an upgrade (their late outcomes after a close are refused, as
-- before). The sole writer's plain INSERT needs no change: the client seals on a remembered
-- SAGA_CLOSED tail only through the locked way.
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

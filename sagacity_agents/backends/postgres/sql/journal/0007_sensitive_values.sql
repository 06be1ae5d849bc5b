-- 0007: sensitive values (core/sensitive.py, core/data_keys.py).
-- (1) Each entry may carry its sensitive values encrypted, in a nullable column of its own,
-- outside the hashed bytes and the tag (NULL: none; every row written before).
-- (2) Each saga's data key, per generation, stored only WRAPPED by the master key the
-- application configures. An erasure deletes the row and inserts a tombstone (wrapped NULL, who,
-- when, why); the application's role may INSERT and SELECT here but not DELETE or UPDATE: that
-- takes the eraser role (`sagacity db grant --eraser ROLE`, sql/eraser_role.sql).
-- (3) The append function of 0005 under a new name (not an overload: a GRANT names it without
-- its argument types), with one more argument, p_sealed, stored in the new column. 0005's
-- function stays for workers of the previous release during an upgrade (their rows are unsealed).
-- The sole writer's plain INSERT and the batch name the column themselves.
ALTER TABLE sagacity_journal ADD COLUMN sealed bytea;
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

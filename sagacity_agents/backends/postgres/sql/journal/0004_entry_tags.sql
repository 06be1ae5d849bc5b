-- 0004: entry tags (issue 19, core/authenticity.py). Every entry a writer with a keyring
-- appends carries a tag (an Ed25519 signature by a key the database does not hold) over its
-- content without its chain links, in two columns of their own beside the bytes they cover:
-- tag_key (the key id) and tag (base64). The client makes the tag before the insert (the locked
-- append computes seq and prev_hash here, under the lock, so a tag over the final hash could not
-- be made by the client, and the application's role cannot UPDATE). Rows of earlier versions
-- stay NULL (untagged). The append function of 0003 under a new name (not an overload: a GRANT
-- names it without its argument types), with two more arguments, p_tag_key and p_tag, stored as
-- they are; 0003's function stays for workers of the previous release during an upgrade (their
-- appends are untagged, which a keyring then refuses).
ALTER TABLE sagacity_journal ADD COLUMN tag_key text, ADD COLUMN tag text;

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

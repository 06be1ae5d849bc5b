-- 0003: a batch of appends to one saga as one statement, `SELECT * FROM
-- sagacity_append_entries(...)` (see core/postgres_journal.py, PostgresJournal.append_many): one
-- round trip and one transaction, as 0002's appends sent in a pipeline, without a pipeline's cost
-- per statement on the client (measured in bench/postgres_call_breakdown.py). The arrays hold one
-- element per append, in order; each append is 0002's `sagacity_append_entry`, so the contract is
-- the same, with two batch rules:
--   o every append but the first passes the write key of the one before it as p_after_key: it is
--     written only if that one was inserted by this very transaction (the batch stops at its first
--     append that inserts nothing);
--   o p_durable is the batch's: true when any of its appends must be durable. The batch is one
--     transaction with one commit, so an append that may skip the flush does not turn it off for
--     the others; under contention the first append turns it off and answers 'unflushed', and the
--     client makes the whole batch durable with one synchronous commit of its own (WAL order).
-- 0002's function stays: a batch is that function, called once per append, in order.
CREATE FUNCTION sagacity_append_entries(
    p_saga_id text, p_phases text[], p_tools text[], p_call_ids text[], p_write_keys text[],
    p_recorded_at text[], p_genesis text, p_heads bytea[], p_middles bytea[], p_tails bytea[],
    p_durable boolean, p_expected_seqs bigint[], p_terminal text[],
    OUT o_status text, OUT o_seq bigint, OUT o_prev_hash text, OUT o_hash text,
    OUT o_tail_phase text
)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_phases, 1), 0) LOOP
        SELECT a.o_status, a.o_seq, a.o_prev_hash, a.o_hash, a.o_tail_phase
        INTO o_status, o_seq, o_prev_hash, o_hash, o_tail_phase
        FROM sagacity_append_entry(
            p_saga_id, p_phases[i], p_tools[i], p_call_ids[i], p_write_keys[i], p_recorded_at[i],
            p_genesis, p_heads[i], p_middles[i], p_tails[i], p_durable, p_expected_seqs[i],
            p_terminal, CASE WHEN i > 1 THEN p_write_keys[i - 1] END) a;
        RETURN NEXT;
    END LOOP;
END $$;

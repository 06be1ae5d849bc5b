"""The journal contract: one abstract test suite every backend passes.

A backend's test module subclasses :class:`JournalContract` in a few lines, providing two fixtures:

* ``journal``: a fresh, empty journal built with the ``clock`` fixture (a FrozenClock);
* ``tamper``: a :class:`Tamper` for that journal, editing storage behind the journal's back the way
  an attacker with storage access would (in memory: ``_replace`` / ``_delete``; SQL: UPDATE/DELETE).

Every tamper case names the first bad sequence number and the fault verification must report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import threading
from typing import Any

import pytest
import rfc8785

from sagacity_agents.core.canonical import parse_json
from sagacity_agents.core.chain import (
    ChainFault,
    ChainHead,
    heads_of,
    verify_entries,
    verify_journal,
)
from sagacity_agents.core.entries import GENESIS_HASH, JournalEntry, Phase
from sagacity_agents.core.journal import Journal, append_each
from sagacity_agents.errors import (
    ClaimTakenError,
    EncodingError,
    JournalClosedError,
    JournalConflictError,
    JournalWriteError,
)
from sagacity_agents.testing import FrozenClock

SAGA = "saga-1"


class Tamper:
    """Edits a backend's storage directly. Columns are named as in the SQL schema."""

    def set_canonical(self, saga_id: str, seq: int, data: bytes) -> None:
        """Overwrite the stored canonical bytes (every other column unchanged)."""
        raise NotImplementedError

    def set_column(self, saga_id: str, seq: int, column: str, value: Any) -> None:
        """Overwrite one stored column (``hash``, ``phase``, ``tool``, ``call_id``...)."""
        raise NotImplementedError

    def delete(self, saga_id: str, seq: int) -> None:
        """Remove one stored entry."""
        raise NotImplementedError

    def swap(self, saga_id: str, a: int, b: int) -> None:
        """Exchange the stored contents of entries ``a`` and ``b``; their seq columns stay."""
        raise NotImplementedError

    def reseal(self, saga_id: str, seq: int, data: bytes) -> None:
        """Overwrite the bytes *and* store their correct SHA-256 (a careful attacker)."""
        self.set_canonical(saga_id, seq, data)
        self.set_column(saga_id, seq, "hash", hashlib.sha256(data).hexdigest())


def rewrite_payload(entry: JournalEntry, payload: Any) -> bytes:
    """The canonical bytes ``entry`` would have with another payload (same everything else)."""
    obj = parse_json(entry.canonical)
    obj["payload"] = payload
    return rfc8785.dumps(obj)


async def fill(journal: Journal, n: int = 5, saga_id: str = SAGA) -> list[JournalEntry]:
    """Append ``n`` tool entries (INTENT / EXECUTED alternating) and return them."""
    out = []
    for i in range(1, n + 1):
        out.append(
            await journal.append(
                saga_id,
                Phase.INTENT if i % 2 else Phase.EXECUTED,
                write_key=f"w{i}",
                tool="charge",
                call_id=f"call_{(i + 1) // 2}",
                payload={"i": i, "amount": 100 + i},
            )
        )
    return out


async def verify_one(journal: Journal, saga_id: str = SAGA, heads=None):
    (result,) = await verify_journal(journal, saga_id, heads=heads)
    return result


def rewrite_tail(tamper: Tamper, written: list[JournalEntry], from_seq: int) -> list[str]:
    """Rewrite entries ``from_seq``.. with new payloads *and* relink every later entry to its
    rewritten predecessor (a careful attacker with storage access). Returns the new hashes."""
    prev = written[from_seq - 2].hash if from_seq > 1 else GENESIS_HASH
    hashes = []
    for entry in written[from_seq - 1:]:
        obj = parse_json(entry.canonical)
        obj["payload"] = {"i": entry.seq, "amount": 0}
        obj["prev_hash"] = prev
        data = rfc8785.dumps(obj)
        tamper.reseal(entry.saga_id, entry.seq, data)
        tamper.set_column(entry.saga_id, entry.seq, "prev_hash", prev)
        prev = hashlib.sha256(data).hexdigest()
        hashes.append(prev)
    return hashes


def assert_chain(entries: list[JournalEntry], n: int) -> None:
    """Seq exactly 1..n, genesis link, every link pointing at the previous hash."""
    assert [e.seq for e in entries] == list(range(1, n + 1))
    assert entries[0].prev_hash == GENESIS_HASH == "0" * 64
    for before, after in itertools.pairwise(entries):
        assert after.prev_hash == before.hash
    for e in entries:
        assert e.hash == hashlib.sha256(e.canonical).hexdigest()


class JournalContract:
    """Tests every Journal backend must pass. Subclass and provide ``journal`` and ``tamper``."""

    @pytest.fixture
    def clock(self) -> FrozenClock:
        return FrozenClock(tick=0.001)

    # --- append and read ------------------------------------------------------------------
    async def test_is_a_journal(self, journal):
        assert isinstance(journal, Journal)

    async def test_append_returns_sealed_entry(self, journal):
        entry = await journal.append(
            SAGA, Phase.INTENT, write_key="k1", tool="charge", call_id="call_1", payload={"a": 1}
        )
        assert (entry.saga_id, entry.seq, entry.phase) == (SAGA, 1, Phase.INTENT)
        assert (entry.tool, entry.call_id, entry.write_key) == ("charge", "call_1", "k1")
        assert entry.payload == {"a": 1}
        assert entry.recorded_at == "2026-01-01T00:00:00.000000Z"
        assert entry.prev_hash == "0" * 64
        assert entry.canonical == rfc8785.dumps(entry.hashed_object())
        assert entry.hash == hashlib.sha256(entry.canonical).hexdigest()
        assert len(entry.hash) == 64 and entry.hash == entry.hash.lower()

    async def test_read_back_equals_appended(self, journal):
        written = await fill(journal, 6)
        read = await journal.entries(SAGA)
        assert read == written
        assert [e.payload for e in read] == [{"i": i, "amount": 100 + i} for i in range(1, 7)]

    async def test_seq_one_to_n_without_gaps_and_linked(self, journal):
        await fill(journal, 7)
        assert_chain(await journal.entries(SAGA), 7)

    async def test_genesis_prev_hash_is_64_zeros(self, journal):
        first = await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open")
        assert first.prev_hash == "0" * 64
        assert b'"prev_hash":"' + b"0" * 64 + b'"' in first.canonical

    async def test_sagas_have_independent_chains(self, journal):
        for i in range(4):
            await journal.append("s-b", Phase.INTENT, write_key=f"k{i}", payload=i)
            await journal.append("s-a", Phase.INTENT, write_key=f"k{i}", payload=i)
        assert await journal.saga_ids() == ["s-b", "s-a"]
        for sid in ("s-a", "s-b"):
            entries = await journal.entries(sid)
            assert_chain(entries, 4)
            assert {e.saga_id for e in entries} == {sid}
        assert all(r.ok for r in await verify_journal(journal))

    # --- listing sagas: saga_summaries ----------------------------------------------------------
    async def test_saga_summaries_pages_in_saga_ids_order(self, journal):
        for i in range(3):
            await journal.append("s-c", Phase.INTENT, write_key=f"k{i}", tool="t", payload=i)
        await journal.append("s-a", Phase.SAGA_OPENED, write_key="open", payload={})
        await journal.append("s-b", Phase.INTENT, write_key="k0", payload=0)
        await journal.append("s-a", Phase.SAGA_CLOSED, write_key="close", payload={"status": "COMPLETED"})
        every = await journal.saga_summaries()
        assert [s.saga_id for s in every] == await journal.saga_ids() == ["s-c", "s-a", "s-b"]
        c, a, b = every
        assert (c.entry_count, c.first.seq, c.last.seq, c.last.payload) == (3, 1, 3, 2)
        assert c.first == (await journal.entries("s-c"))[0]
        assert c.last == (await journal.entries("s-c"))[-1]
        assert (a.entry_count, a.first.phase, a.last.phase) == (2, Phase.SAGA_OPENED, Phase.SAGA_CLOSED)
        assert a.last.payload == {"status": "COMPLETED"}
        assert b.entry_count == 1 and b.first == b.last
        assert [s.saga_id for s in await journal.saga_summaries(offset=1, limit=1)] == ["s-a"]
        assert [s.saga_id for s in await journal.saga_summaries(offset=2)] == ["s-b"]
        assert await journal.saga_summaries(offset=3) == []
        assert await journal.saga_summaries(limit=0) == []
        for bad in ({"offset": -1}, {"limit": -1}, {"offset": True}):
            with pytest.raises(ValueError):
                await journal.saga_summaries(**bad)

    async def test_saga_summaries_reads_what_is_stored(self, journal, tamper):
        # A summary is unverified, as stored: the bounds are the stored seqs after a deletion.
        await fill(journal, 4)
        tamper.delete(SAGA, 4)
        tamper.delete(SAGA, 1)
        (only,) = await journal.saga_summaries()
        assert (only.entry_count, only.first.seq, only.last.seq) == (2, 2, 3)

    # --- the shared append rule: closed is terminal; conditional appends ---------------------
    async def test_nothing_is_appended_after_saga_closed(self, journal):
        await fill(journal, 2)
        closed = await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="saga:closed",
                                      payload={"status": "COMPLETED"})
        for phase in (Phase.INTENT, Phase.EXECUTED, Phase.RUN_STARTED, Phase.SAGA_CLOSED):
            with pytest.raises(JournalClosedError, match="closed"):
                await journal.append(SAGA, phase, write_key=f"late:{phase.value}", payload={})
        # A retry of the close itself is the same write: it returns the stored entry.
        again = await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="saga:closed",
                                     payload={"status": "COMPLETED"})
        assert again == closed
        assert (await journal.entries(SAGA))[-1] == closed
        assert issubclass(JournalClosedError, JournalWriteError)
        await journal.append("other", Phase.INTENT, write_key="k", payload={})  # other sagas go on
        assert (await verify_one(journal)).ok

    async def test_conditional_append_writes_only_on_the_expected_tail(self, journal):
        first = await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open", expected_seq=0)
        assert first.seq == 1
        with pytest.raises(JournalConflictError, match="ends at seq 1, not 0"):
            await journal.append(SAGA, Phase.RUN_STARTED, write_key="run-a", expected_seq=0)
        second = await journal.append(SAGA, Phase.RUN_STARTED, write_key="run-b", expected_seq=1)
        assert second.seq == 2
        with pytest.raises(JournalConflictError):
            await journal.append(SAGA, Phase.RUN_STARTED, write_key="run-c", expected_seq=1)
        # A retry of a stored write returns it, whatever the tail is now.
        assert await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open", expected_seq=0) == first
        assert [e.write_key for e in await journal.entries(SAGA)] == ["open", "run-b"]

    async def test_concurrent_conditional_appends_one_wins(self, journal):
        await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open")

        async def take(i: int) -> bool:
            try:
                await journal.append(SAGA, Phase.RUN_STARTED, write_key=f"run-{i}", expected_seq=1)
            except JournalConflictError:
                return False
            return True

        won = await asyncio.gather(*(take(i) for i in range(10)))
        assert sum(won) == 1
        assert_chain(await journal.entries(SAGA), 2)

    # --- several appends at once (append_each: one round trip where the backend batches) ------
    async def test_append_each_writes_in_order_and_equals_appends_one_by_one(self, journal):
        opened, started = await append_each(journal, SAGA, [
            {"phase": Phase.SAGA_OPENED, "write_key": "saga:open", "payload": {"metadata": {}}},
            {"phase": Phase.RUN_STARTED, "write_key": "run:a", "payload": {"holder": "h"},
             "expected_seq": 1},
        ])
        assert (opened.seq, started.seq, started.prev_hash) == (1, 2, opened.hash)
        assert await journal.entries(SAGA) == [opened, started]
        # A retry of the whole batch is the same two writes: both stored entries come back.
        assert await append_each(journal, SAGA, [
            {"phase": Phase.SAGA_OPENED, "write_key": "saga:open", "payload": {"metadata": {}}},
            {"phase": Phase.RUN_STARTED, "write_key": "run:a", "payload": {"holder": "h"},
             "expected_seq": 1},
        ]) == [opened, started]
        ended, closed = await append_each(journal, SAGA, [
            {"phase": Phase.RUN_ENDED, "write_key": "run-end:a", "payload": {"status": "COMPLETED"}},
            {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed", "payload": {"status": "COMPLETED"}},
        ])
        assert (ended.seq, closed.seq) == (3, 4)
        assert (await verify_one(journal)).ok

    async def test_append_each_after_a_retried_write_writes_the_rest_in_order(self, journal):
        """The first append of a batch is a retry of a stored write (its ack was lost): the
        stored entry comes back and the rest is written after the saga's tail, in order."""
        stored = await journal.append(SAGA, Phase.RUN_ENDED, write_key="run-end:a",
                                      payload={"status": "OPEN"})
        other = await journal.append(SAGA, Phase.INTENT, write_key="other", payload={})
        again, closed, after = await append_each(journal, SAGA, [
            {"phase": Phase.RUN_ENDED, "write_key": "run-end:a", "payload": {"status": "OPEN"}},
            {"phase": Phase.RUN_STARTED, "write_key": "run:b", "payload": {}},
            {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed", "payload": {}},
        ])
        assert again == stored
        assert (closed.seq, closed.prev_hash, after.seq) == (3, other.hash, 4)
        assert await journal.entries(SAGA) == [stored, other, closed, after]

    async def test_append_each_stops_at_an_append_that_reuses_a_write_key(self, journal):
        """A write key already used for another entry raises, and nothing after it is written."""
        await journal.append(SAGA, Phase.RUN_ENDED, write_key="run-end:a", payload={"status": "A"})
        with pytest.raises(JournalWriteError, match="already used"):
            await append_each(journal, SAGA, [
                {"phase": Phase.RUN_ENDED, "write_key": "run-end:a", "payload": {"status": "B"}},
                {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed", "payload": {}},
            ])
        assert [e.write_key for e in await journal.entries(SAGA)] == ["run-end:a"]

    async def test_append_each_stops_at_the_first_refused_append(self, journal):
        await fill(journal, 2)
        with pytest.raises(JournalConflictError, match="ends at seq 2, not 5"):
            await append_each(journal, SAGA, [
                {"phase": Phase.RUN_STARTED, "write_key": "run:x", "expected_seq": 5},
                {"phase": Phase.INTENT, "write_key": "after", "payload": {}},
            ])
        await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="saga:closed", payload={})
        with pytest.raises(JournalClosedError):
            await append_each(journal, SAGA, [
                {"phase": Phase.RUN_ENDED, "write_key": "run-end:x", "payload": {}},
                {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed-2", "payload": {}},
            ])
        assert [e.write_key for e in await journal.entries(SAGA)][2:] == ["saga:closed"]

    # --- claims (E-05): COMPENSATING and CONSUMED carry the writer's nonce -------------------
    @pytest.mark.parametrize("phase", [Phase.COMPENSATING, Phase.CONSUMED])
    async def test_claim_taken_by_another_writer_is_refused(self, journal, phase):
        """E-05 claim rule: a second writer (another nonce) finding the claim's key taken gets
        ClaimTakenError, never the first writer's entry as its own; the first writer's plain
        retry (same key, same payload, same nonce) still returns its stored entry."""
        await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open")
        mine = {"target_seq": 1, "request_id": "r1", "claimant": "writer-a"}
        first = await journal.append(SAGA, phase, write_key="claim:1", tool="t", call_id="c", payload=mine)
        assert await journal.append(SAGA, phase, write_key="claim:1", tool="t", call_id="c",
                                    payload=dict(mine)) == first
        with pytest.raises(ClaimTakenError, match="already claimed by another writer") as caught:
            await journal.append(SAGA, phase, write_key="claim:1", tool="t", call_id="c",
                                 payload={**mine, "claimant": "writer-b"})
        assert isinstance(caught.value, JournalConflictError)
        assert (caught.value.seq, caught.value.claimant) == (first.seq, "writer-a")
        assert_chain(await journal.entries(SAGA), 2)

    @pytest.mark.parametrize("phase", [Phase.COMPENSATING, Phase.CONSUMED])
    async def test_claim_without_a_nonce_is_refused(self, journal, phase):
        with pytest.raises(ValueError, match="claimant"):
            await journal.append(SAGA, phase, write_key="claim:1", payload={"target_seq": 1})
        assert await journal.entries(SAGA) == []

    async def test_concurrent_claims_of_one_key_one_writer_wins(self, journal):
        """E-05: 20 writers claim one undo key at once: exactly one gets the entry; every other
        one is refused (none is handed the winner's entry)."""
        await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open")

        async def claim(i: int) -> JournalEntry | None:
            try:
                return await journal.append(
                    SAGA, Phase.COMPENSATING, write_key="undo:1:1:start",
                    payload={"target_seq": 1, "attempt": 1, "claimant": f"w{i}"})
            except ClaimTakenError:
                return None

        won = [e for e in await asyncio.gather(*(claim(i) for i in range(20))) if e is not None]
        assert len(won) == 1
        assert_chain(await journal.entries(SAGA), 2)

    async def test_unknown_saga_is_empty(self, journal):
        assert await journal.entries("nope") == []
        result = await verify_one(journal, "nope")
        assert result.ok and result.entries == 0 and result.head is None

    async def test_empty_saga_id_or_write_key_refused(self, journal):
        with pytest.raises(ValueError):
            await journal.append("", Phase.INTENT, write_key="k")
        with pytest.raises(ValueError):
            await journal.append(SAGA, Phase.INTENT, write_key="")
        assert await journal.saga_ids() == []

    # --- write keys -----------------------------------------------------------------------
    async def test_write_key_retry_returns_same_entry(self, journal, clock):
        kwargs = {"write_key": "w-retry", "tool": "charge", "call_id": "call_1", "payload": {"amount": 10}}
        first = await journal.append(SAGA, Phase.EXECUTED, **kwargs)
        await journal.append(SAGA, Phase.INTENT, write_key="other", payload=None)
        clock.advance(60)
        again = await journal.append(SAGA, Phase.EXECUTED, **kwargs)
        assert again == first
        assert again.seq == 1 and again.hash == first.hash and again.canonical == first.canonical
        assert len(await journal.entries(SAGA)) == 2

    async def test_write_key_retry_with_equal_but_differently_typed_payload(self, journal):
        # 1.0 and 1 have one canonical form ("1"): the same write.
        first = await journal.append(SAGA, Phase.EXECUTED, write_key="w", payload={"x": 1})
        assert await journal.append(SAGA, Phase.EXECUTED, write_key="w", payload={"x": 1.0}) == first

    @pytest.mark.parametrize(
        "change",
        [
            {"payload": {"amount": 11}},
            {"payload": {"amount": True}},  # True == 1 in Python, not in JSON
            {"phase": Phase.FAILED},
            {"tool": "refund"},
            {"call_id": "call_2"},
        ],
        ids=["payload", "payload-bool-vs-int", "phase", "tool", "call_id"],
    )
    async def test_reused_write_key_with_different_content_raises(self, journal, change):
        base = {"phase": Phase.EXECUTED, "tool": "charge", "call_id": "call_1", "payload": {"amount": 1}}
        await journal.append(SAGA, write_key="w", **base)
        with pytest.raises(JournalWriteError, match="write key"):
            await journal.append(SAGA, write_key="w", **{**base, **change})
        assert len(await journal.entries(SAGA)) == 1

    async def test_same_write_key_in_another_saga_is_another_write(self, journal):
        a = await journal.append("s-a", Phase.INTENT, write_key="same", payload=1)
        b = await journal.append("s-b", Phase.INTENT, write_key="same", payload=2)
        assert (a.seq, b.seq) == (1, 1) and a.hash != b.hash

    # --- encoding -------------------------------------------------------------------------
    @pytest.mark.parametrize(
        "payload",
        [{"x": object()}, {"x": float("nan")}, {1: "non-string key"}, [float("inf")]],
        ids=["object", "nan", "int-key", "inf"],
    )
    async def test_unencodable_payload_raises_and_writes_nothing(self, journal, clock, payload):
        with pytest.raises(EncodingError):
            await journal.append(SAGA, Phase.EXECUTED, write_key="w1", payload=payload)
        assert await journal.entries(SAGA) == []
        assert await journal.saga_ids() == []
        assert clock.calls == 0
        # The key was not consumed and the chain starts at 1.
        entry = await journal.append(SAGA, Phase.EXECUTED, write_key="w1", payload={"x": 1})
        assert entry.seq == 1 and entry.prev_hash == GENESIS_HASH

    # --- verification ---------------------------------------------------------------------
    async def test_verify_ok(self, journal):
        written = await fill(journal, 5)
        result = await verify_one(journal)
        assert result.ok, str(result)
        assert (result.entries, result.head, result.bad_seq, result.fault) == (5, written[-1].hash, None, None)

    async def test_tamper_edited_payload_bytes_is_hash_mismatch(self, journal, tamper):
        written = await fill(journal, 5)
        data = written[2].canonical.replace(b'"amount":103', b'"amount":999')
        assert data != written[2].canonical
        tamper.set_canonical(SAGA, 3, data)
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 3, ChainFault.HASH_MISMATCH)

    async def test_tamper_edited_hash_column_is_hash_mismatch(self, journal, tamper):
        await fill(journal, 5)
        tamper.set_column(SAGA, 3, "hash", "f" * 64)
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 3, ChainFault.HASH_MISMATCH)

    async def test_tamper_deleted_middle_entry_is_gap(self, journal, tamper):
        await fill(journal, 5)
        tamper.delete(SAGA, 3)
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 3, ChainFault.GAP)

    @pytest.mark.parametrize(
        ("column", "value"),
        [
            ("phase", "COMPENSATED"),
            ("tool", "refund"),
            ("call_id", "call_99"),
            ("write_key", "forged"),
            ("recorded_at", "2030-01-01T00:00:00.000000Z"),
            ("prev_hash", "a" * 64),
        ],
    )
    async def test_tamper_column_edited_bytes_untouched_is_column_mismatch(
        self, journal, tamper, column, value
    ):
        written = await fill(journal, 5)
        tamper.set_column(SAGA, 3, column, value)
        entries = await journal.entries(SAGA)
        assert entries[2].canonical == written[2].canonical  # bytes untouched, hash still fits
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 3, ChainFault.COLUMN_MISMATCH)
        assert column in result.detail

    async def test_tamper_swapped_entries_detected(self, journal, tamper):
        await fill(journal, 5)
        tamper.swap(SAGA, 2, 3)
        result = await verify_one(journal)
        assert not result.ok and result.bad_seq == 2
        assert result.fault in (ChainFault.REORDERED, ChainFault.BROKEN_LINK)

    async def test_tamper_entry_copied_over_a_later_one_is_reordered(self, journal, tamper):
        written = await fill(journal, 5)
        tamper.set_canonical(SAGA, 4, written[1].canonical)
        tamper.set_column(SAGA, 4, "hash", written[1].hash)
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 4, ChainFault.REORDERED)

    async def test_tamper_rewritten_bytes_with_recomputed_hash_breaks_next_link(self, journal, tamper):
        written = await fill(journal, 5)
        tamper.reseal(SAGA, 3, rewrite_payload(written[2], {"i": 3, "amount": 999}))
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 4, ChainFault.BROKEN_LINK)

    async def test_tamper_resealed_last_entry_changes_only_the_head(self, journal, tamper):
        """The chain is evidence, not prevention: a resealed tail verifies, but its head moved,
        which an exported head hash reveals."""
        written = await fill(journal, 5)
        tamper.reseal(SAGA, 5, rewrite_payload(written[4], {"i": 5, "amount": 0}))
        result = await verify_one(journal)
        assert result.ok and result.head != written[4].hash

    async def test_tamper_rewritten_tail_verifies_without_an_anchor(self, journal, tamper):
        written = await fill(journal, 5)
        rewrite_tail(tamper, written, 3)
        result = await verify_one(journal)
        assert result.ok and result.head != written[-1].hash

    async def test_tamper_deleted_last_entries_verify_without_an_anchor(self, journal, tamper):
        """The chain alone cannot see a truncation: what is left is a valid, shorter chain."""
        written = await fill(journal, 5)
        tamper.delete(SAGA, 5)
        tamper.delete(SAGA, 4)
        result = await verify_one(journal)
        assert result.ok and result.entries == 3 and result.head == written[2].hash

    # --- saga ids come from the entries ---------------------------------------------------
    async def test_saga_with_every_entry_deleted_is_no_longer_listed(self, journal, tamper):
        await fill(journal, 2, saga_id="s-a")
        await fill(journal, 2, saga_id="s-b")
        tamper.delete("s-a", 1)
        assert await journal.saga_ids() == ["s-a", "s-b"]  # still has seq 2
        tamper.delete("s-a", 2)
        assert await journal.saga_ids() == ["s-b"]
        assert [r.saga_id for r in await verify_journal(journal)] == ["s-b"]

    # --- anchors (exported heads) ---------------------------------------------------------
    async def test_anchor_at_the_head_verifies(self, journal):
        written = await fill(journal, 5)
        heads = heads_of(await verify_journal(journal))
        assert heads == {SAGA: ChainHead(5, written[-1].hash)}
        result = await verify_one(journal, heads=heads)
        assert result.ok and result.anchor == heads[SAGA] and result.head == written[-1].hash

    async def test_anchor_still_verifies_after_later_appends(self, journal):
        written = await fill(journal, 3)
        heads = {SAGA: ChainHead(3, written[-1].hash)}
        more = await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="close", payload={})
        result = await verify_one(journal, heads=heads)
        assert result.ok and result.entries == 4 and result.head == more.hash

    @pytest.mark.parametrize("removed", [[5], [5, 4], [5, 4, 3, 2]])
    async def test_anchor_reveals_deleted_last_entries_as_truncated(self, journal, tamper, removed):
        written = await fill(journal, 5)
        heads = {SAGA: ChainHead(5, written[-1].hash)}
        for seq in removed:
            tamper.delete(SAGA, seq)
        result = await verify_one(journal, heads=heads)
        first_missing = min(removed)
        assert (result.ok, result.bad_seq, result.fault) == (False, first_missing, ChainFault.TRUNCATED)
        assert f"chain ends at seq {first_missing - 1}" in result.detail
        assert written[-1].hash in result.detail

    async def test_anchor_reveals_a_saga_with_every_entry_deleted(self, journal, tamper):
        written = await fill(journal, 3)
        await journal.append("other", Phase.SAGA_OPENED, write_key="open")
        heads = heads_of(await verify_journal(journal))
        for seq in (1, 2, 3):
            tamper.delete(SAGA, seq)
        results = await verify_journal(journal, heads=heads)
        assert [r.saga_id for r in results] == ["other", SAGA]  # journal order, then the missing
        other, missing = results
        assert other.ok and other.anchor is not None
        assert (missing.ok, missing.bad_seq, missing.fault) == (False, 1, ChainFault.MISSING_SAGA)
        assert written[-1].hash in missing.detail
        assert (await verify_one(journal, SAGA, heads=heads)).fault is ChainFault.MISSING_SAGA

    async def test_anchor_reveals_a_resealed_last_entry(self, journal, tamper):
        written = await fill(journal, 5)
        heads = {SAGA: ChainHead(5, written[-1].hash)}
        tamper.reseal(SAGA, 5, rewrite_payload(written[4], {"i": 5, "amount": 0}))
        result = await verify_one(journal, heads=heads)
        assert (result.ok, result.bad_seq, result.fault) == (False, 5, ChainFault.HEAD_MISMATCH)

    async def test_anchor_reveals_a_consistently_rewritten_tail(self, journal, tamper):
        written = await fill(journal, 5)
        heads = {SAGA: ChainHead(4, written[3].hash)}
        new_hashes = rewrite_tail(tamper, written, 2)
        result = await verify_one(journal, heads=heads)
        assert (result.ok, result.bad_seq, result.fault) == (False, 4, ChainFault.HEAD_MISMATCH)
        assert new_hashes[2] in result.detail and written[3].hash in result.detail

    async def test_anchor_then_rewrite_then_truncate_to_before_the_anchor(self, journal, tamper):
        """An attacker who rewrites the tail *and* cuts it below the anchor is still caught."""
        written = await fill(journal, 5)
        heads = {SAGA: ChainHead(5, written[-1].hash)}
        rewrite_tail(tamper, written, 3)
        tamper.delete(SAGA, 5)
        result = await verify_one(journal, heads=heads)
        assert (result.ok, result.bad_seq, result.fault) == (False, 5, ChainFault.TRUNCATED)

    async def test_broken_chain_reports_its_own_fault_first_and_the_anchor_too(self, journal, tamper):
        written = await fill(journal, 5)
        heads = {SAGA: ChainHead(5, written[-1].hash)}
        tamper.set_column(SAGA, 2, "tool", "refund")
        tamper.delete(SAGA, 5)
        result = await verify_one(journal, heads=heads)
        assert (result.ok, result.bad_seq, result.fault) == (False, 2, ChainFault.COLUMN_MISMATCH)
        assert "also truncated at seq 5" in result.detail

    async def test_heads_of_refuses_a_broken_chain(self, journal, tamper):
        await fill(journal, 3)
        tamper.set_column(SAGA, 2, "tool", "refund")
        with pytest.raises(ValueError, match="does not verify"):
            heads_of(await verify_journal(journal))

    async def test_tamper_malformed_bytes_with_matching_hash(self, journal, tamper):
        await fill(journal, 5)
        tamper.reseal(SAGA, 3, b"not json at all")
        result = await verify_one(journal)
        assert (result.ok, result.bad_seq, result.fault) == (False, 3, ChainFault.MALFORMED)

    async def test_verify_entries_matches_verify_journal(self, journal, tamper):
        await fill(journal, 4)
        tamper.set_column(SAGA, 2, "tool", "x")
        direct = verify_entries(SAGA, await journal.entries(SAGA))
        assert direct == await verify_one(journal)

    # --- concurrency ----------------------------------------------------------------------
    async def test_50_tasks_on_one_saga_get_seq_1_to_50(self, journal):
        async def one(i: int) -> JournalEntry:
            return await journal.append(SAGA, Phase.INTENT, write_key=f"t{i}", payload={"task": i})

        written = await asyncio.gather(*(one(i) for i in range(50)))
        assert sorted(e.seq for e in written) == list(range(1, 51))
        entries = await journal.entries(SAGA)
        assert_chain(entries, 50)
        assert sorted(e.write_key for e in entries) == sorted(f"t{i}" for i in range(50))
        assert (await verify_one(journal)).ok

    async def test_concurrent_retries_of_one_write_store_it_once(self, journal):
        async def one(i: int) -> JournalEntry:
            return await journal.append(SAGA, Phase.INTENT, write_key=f"t{i % 10}", payload={"k": i % 10})

        written = await asyncio.gather(*(one(i) for i in range(40)))
        entries = await journal.entries(SAGA)
        assert_chain(entries, 10)
        by_key = {e.write_key: e for e in entries}
        assert all(by_key[e.write_key] == e for e in written)

    async def test_threads_each_with_own_event_loop(self, journal):
        threads_n, per_thread = 6, 20
        errors: list[BaseException] = []
        start = threading.Barrier(threads_n)

        def worker(t: int) -> None:
            async def go() -> None:
                for i in range(per_thread):
                    await journal.append(SAGA, Phase.EXECUTED, write_key=f"{t}:{i}", payload={"t": t, "i": i})

            try:
                start.wait(timeout=10)
                asyncio.run(go())
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
        for th in threads:
            th.start()
        for th in threads:
            await asyncio.to_thread(th.join, 30)
        assert not errors
        entries = await journal.entries(SAGA)
        assert_chain(entries, threads_n * per_thread)
        for t in range(threads_n):  # each writer's own appends keep their order
            mine = [e.payload["i"] for e in entries if e.payload["t"] == t]
            assert mine == list(range(per_thread))
        assert (await verify_one(journal)).ok

    async def test_threads_through_run_coroutine_threadsafe(self, journal):
        loop = asyncio.get_running_loop()
        threads_n, per_thread = 5, 10

        def worker(t: int) -> list[int]:
            seqs = []
            for i in range(per_thread):
                fut = asyncio.run_coroutine_threadsafe(
                    journal.append(SAGA, Phase.EXECUTED, write_key=f"{t}:{i}", payload=[t, i]), loop
                )
                seqs.append(fut.result(timeout=30).seq)
            return seqs

        results = await asyncio.gather(*(asyncio.to_thread(worker, t) for t in range(threads_n)))
        for seqs in results:
            assert seqs == sorted(seqs)
        assert sorted(s for seqs in results for s in seqs) == list(range(1, threads_n * per_thread + 1))
        assert_chain(await journal.entries(SAGA), threads_n * per_thread)
        assert (await verify_one(journal)).ok


def replace_entry(entry: JournalEntry, **changes: Any) -> JournalEntry:
    """``dataclasses.replace`` for the frozen entry (in-memory tampering)."""
    return dataclasses.replace(entry, **changes)

"""T-02, chain and link verification (core.chain): each fault reached alone, named by its fault."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sagacity_agents.backends import Phase
from sagacity_agents.core.chain import (
    ChainFault,
    ChainHead,
    check_anchor,
    verify_entries,
)

from .support import SAGA, journal_of, resealed

pytestmark = pytest.mark.case("T-02")


async def three():
    _, entries = await journal_of((Phase.SAGA_OPENED, {}), (Phase.INTENT, {"tool": "t", "call_id": "c"}),
                                  (Phase.EXECUTED, {"tool": "t", "call_id": "c", "payload": {"x": 1}}))
    return entries


def edited(entry, **fields):
    """``entry`` whose hashed bytes say ``fields`` (and the column agrees unless told)."""
    obj = json.loads(entry.canonical)
    obj.update(fields)
    return resealed(entry, json.dumps(obj, separators=(",", ":"), sort_keys=True).encode())


async def test_a_sound_chain_verifies_with_its_head():
    entries = await three()
    result = verify_entries(SAGA, entries)
    assert result.ok and result.fault is None
    assert result.head == entries[-1].hash and result.entries == 3
    assert verify_entries(SAGA, []).head is None


async def test_a_column_other_than_the_payload_disagreeing_with_the_bytes_is_a_column_mismatch():
    entries = await three()
    for column, value in (("tool", "other"), ("call_id", "c9"), ("write_key", "kx")):
        forged = [*entries[:1], dataclasses.replace(entries[1], **{column: value}), entries[2]]
        result = verify_entries(SAGA, forged)
        assert (result.ok, result.bad_seq, result.fault) == (False, 2, ChainFault.COLUMN_MISMATCH)
        assert f"column {column}=" in result.detail


async def test_the_payload_column_is_not_compared_as_a_column():
    """The payload column holds the decoded value (a tuple reads back as a list, ...): only the
    hashed bytes count, so a payload column that differs in form is not a fault."""
    entries = await three()
    same = dataclasses.replace(entries[2], payload={"x": 1.0})
    assert verify_entries(SAGA, [*entries[:2], same]).ok


async def test_bytes_that_are_not_an_entry_object_are_malformed():
    entries = await three()
    for canonical in (b"not json", b"[1, 2]", json.dumps({"seq": 3}).encode()):
        result = verify_entries(SAGA, [*entries[:2], resealed(entries[2], canonical)])
        assert (result.bad_seq, result.fault) == (3, ChainFault.MALFORMED), canonical


async def test_a_seq_out_of_place_is_a_gap_or_reordered():
    a, b, c = await three()
    assert verify_entries(SAGA, [a, c]).fault is ChainFault.GAP
    assert verify_entries(SAGA, [a, c, b]).fault is ChainFault.REORDERED
    assert verify_entries(SAGA, [a, b, b]).fault is ChainFault.REORDERED


async def test_bytes_moved_under_another_seq_are_reordered():
    """The seq column is in place, the hashed bytes say another seq: moved bytes."""
    a, b, c = await three()
    result = verify_entries(SAGA, [a, b, edited(c, seq=2)])
    assert (result.bad_seq, result.fault) == (3, ChainFault.REORDERED)
    assert result.detail == "hashed bytes say seq 2"


async def test_a_link_to_another_entry_is_a_broken_link_and_another_saga_a_mismatch():
    a, b, c = await three()
    assert verify_entries(SAGA, [a, b, edited(c, prev_hash=a.hash)]).fault is ChainFault.COLUMN_MISMATCH
    relinked = dataclasses.replace(edited(c, prev_hash=a.hash), prev_hash=a.hash)
    result = verify_entries(SAGA, [a, b, relinked])
    assert (result.bad_seq, result.fault) == (3, ChainFault.BROKEN_LINK)
    assert verify_entries("other", [a, b, c]).fault is ChainFault.COLUMN_MISMATCH


async def test_anchor_faults_each_named():
    entries = await three()
    head = ChainHead(3, entries[2].hash)
    assert check_anchor(SAGA, entries, head) is None
    assert check_anchor(SAGA, [], head).fault is ChainFault.MISSING_SAGA
    cut = check_anchor(SAGA, entries[:2], head)
    assert (cut.fault, cut.bad_seq) == (ChainFault.TRUNCATED, 3)
    hole = check_anchor(SAGA, [entries[0], entries[2]], ChainHead(2, entries[1].hash))
    assert (hole.fault, hole.bad_seq) == (ChainFault.TRUNCATED, 2)
    moved = check_anchor(SAGA, entries, ChainHead(2, entries[2].hash))
    assert (moved.fault, moved.bad_seq) == (ChainFault.HEAD_MISMATCH, 2)


async def test_a_broken_chain_with_a_disagreeing_anchor_reports_both_and_fails():
    entries = await three()
    broken = [*entries[:2], resealed(entries[2], b"not json")]
    result = verify_entries(SAGA, broken[:2] + broken[2:], ChainHead(4, "f" * 64))
    assert result.ok is False and result.fault is ChainFault.MALFORMED and result.bad_seq == 3
    assert "; also truncated at seq 4" in result.detail
    quiet = verify_entries(SAGA, broken, ChainHead(3, broken[2].hash))
    assert quiet.ok is False and "also" not in quiet.detail
    assert verify_entries(SAGA, entries, ChainHead(3, entries[2].hash)).ok


async def test_a_payload_the_fast_reader_cannot_encode_goes_to_the_strict_reader():
    """The read-speed path (``_encodes_to``) gives up on a payload orjson cannot encode (an
    integer past 64 bits, which no run writes: RFC 8785 numbers are doubles); the strict reader
    then compares the columns with the bytes, so a tampered column beside it is still found."""
    entries = await three()
    forged = dataclasses.replace(entries[2], payload={"x": 2**70}, phase=Phase.FAILED)
    result = verify_entries(SAGA, [*entries[:2], forged])
    assert (result.ok, result.bad_seq, result.fault) == (False, 3, ChainFault.COLUMN_MISMATCH)
    assert "column phase=" in result.detail

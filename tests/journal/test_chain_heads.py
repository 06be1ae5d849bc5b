"""Anchored heads: their JSON form and the pure checks of :func:`verify_entries` against one."""

from __future__ import annotations

import json

import pytest

from sagacity_agents.core.chain import (
    ChainFault,
    ChainHead,
    VerifyResult,
    heads_from_json,
    heads_of,
    heads_to_json,
    verify_entries,
)
from sagacity_agents.core.entries import Phase
from sagacity_agents.backends.memory.journal import InMemoryJournal
from sagacity_agents.testing import FrozenClock

H1, H2 = "a" * 64, "b" * 64


def test_json_round_trip_keeps_order():
    heads = {"s-2": ChainHead(3, H1), "s-1": ChainHead(14, H2)}
    document = json.dumps(heads_to_json(heads))
    assert json.loads(document) == {"s-2": {"seq": 3, "hash": H1}, "s-1": {"seq": 14, "hash": H2}}
    parsed = heads_from_json(json.loads(document))
    assert parsed == heads and list(parsed) == ["s-2", "s-1"]


def test_uppercase_hashes_are_accepted_and_lowered():
    assert heads_from_json({"s": {"seq": 1, "hash": H1.upper()}}) == {"s": ChainHead(1, H1)}


def test_empty_object_is_no_heads():
    assert heads_from_json({}) == {}


@pytest.mark.parametrize(
    "data",
    [
        [],
        "s",
        {"s": [1, H1]},
        {"s": {"seq": 1}},
        {"s": {"seq": 1, "hash": H1, "extra": 1}},
        {"s": {"seq": 0, "hash": H1}},
        {"s": {"seq": "1", "hash": H1}},
        {"s": {"seq": True, "hash": H1}},
        {"s": {"seq": 1.0, "hash": H1}},
        {"s": {"seq": 1, "hash": "abc"}},
        {"s": {"seq": 1, "hash": H1 + "\n"}},
        {"s": {"seq": 1, "hash": "g" * 64}},
        {"": {"seq": 1, "hash": H1}},
    ],
)
def test_malformed_heads_are_refused(data):
    with pytest.raises(ValueError):
        heads_from_json(data)


def test_heads_of_leaves_out_empty_chains():
    results = [VerifyResult("empty", True, 0, None), VerifyResult("s", True, 2, H1)]
    assert heads_of(results) == {"s": ChainHead(2, H1)}


async def test_verify_entries_with_and_without_anchor():
    journal = InMemoryJournal(clock=FrozenClock())
    for n in range(3):
        await journal.append("s", Phase.INTENT, write_key=f"k{n}", payload=n)
    entries = await journal.entries("s")
    plain = verify_entries("s", entries)
    assert plain.ok and plain.anchor is None
    anchored = verify_entries("s", entries, ChainHead(2, entries[1].hash))
    assert anchored.ok and anchored.anchor == ChainHead(2, entries[1].hash)
    assert "anchored seq 2 matches" in str(anchored)
    wrong = verify_entries("s", entries, ChainHead(2, H1))
    assert (wrong.ok, wrong.bad_seq, wrong.fault) == (False, 2, ChainFault.HEAD_MISMATCH)
    assert "BROKEN at seq 2: head mismatch" in str(wrong)
    short = verify_entries("s", entries[:1], ChainHead(3, entries[2].hash))
    assert (short.bad_seq, short.fault) == (2, ChainFault.TRUNCATED)
    gone = verify_entries("s", [], ChainHead(3, entries[2].hash))
    assert (gone.bad_seq, gone.fault, gone.entries) == (1, ChainFault.MISSING_SAGA, 0)


def test_verify_reports_an_entry_after_saga_closed():
    """SAGA_CLOSED is terminal: an entry sealed after it (written around the journal's append
    rule, e.g. straight into the database) is a fault named at its seq."""
    from sagacity_agents.core.chain import ChainFault, verify_entries
    from sagacity_agents.core.entries import GENESIS_HASH, Phase, seal_entry

    entries = []
    prev = GENESIS_HASH
    for seq, phase in enumerate((Phase.SAGA_OPENED, Phase.SAGA_CLOSED, Phase.INTENT), start=1):
        entry = seal_entry(saga_id="s", seq=seq, phase=phase, tool=None, call_id=None,
                           write_key=f"k{seq}", payload={}, recorded_at="2026-01-01T00:00:00.000000Z",
                           prev_hash=prev)
        entries.append(entry)
        prev = entry.hash
    assert verify_entries("s", entries[:2]).ok
    result = verify_entries("s", entries)
    assert not result.ok and result.bad_seq == 3 and result.fault is ChainFault.AFTER_CLOSE
    assert "INTENT after SAGA_CLOSED at seq 2" in result.detail

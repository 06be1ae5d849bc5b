"""The one entry a closed saga accepts: the late outcome of a call, under its INTENT's own fence.

On every backend (memory, SQLite, PostgreSQL: its append function of migration 0005, and its
sole writer, which remembers the SAGA_CLOSED tail and must leave the decision to the server):
anything else after SAGA_CLOSED is refused with JournalClosedError and nothing is written;
``verify`` accepts exactly that shape (the late outcome, then a recovery's entries up to a second
SAGA_CLOSED) and reports any other entry after a close. Under a keyring, a late entry counts
only under the key that tagged its run's RUN_STARTED.
"""

from __future__ import annotations

from typing import Any

import pytest

from sagacity_agents.core.authenticity import signing_view
from sagacity_agents.core.chain import ChainFault, verify_entries, verify_journal
from sagacity_agents.core.entries import GENESIS_HASH, Phase, seal_entry
from sagacity_agents.core.evidence import Evidence
from sagacity_agents.core.ledger import is_closed, reopened_by
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.errors import JournalClosedError
from sagacity_agents.backends.memory.journal import InMemoryJournal
from tests.backends import BACKENDS

SAGA = "closed-saga"


@pytest.fixture(params=BACKENDS, ids=str)
def journal(request):
    import asyncio

    backend = request.param
    opened = backend.journal(backend.location(request))
    yield opened
    asyncio.run(opened.close())


async def _closed_with_a_call_in_flight(journal: Any, *, answered: bool = True) -> dict[str, Any]:
    """A run (RUN_STARTED r1) writes an INTENT and stalls; a recovery takes over (r2) and closes
    the saga on a human's "not run" (``answered``; the signed answer of a keyring is not what
    is checked here). Returns the seqs."""
    await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
    r1 = await journal.append(SAGA, Phase.RUN_STARTED, write_key="run1", payload={"holder": "a"})
    intent = await journal.append(SAGA, Phase.INTENT, write_key="i1", tool="book_hotel",
                                  call_id="h1", fence=r1.seq, payload={"args": {"city": "Lisbon"}})
    r2 = await journal.append(SAGA, Phase.RUN_STARTED, write_key="run2", payload={"holder": "b"})
    if answered:
        await journal.append(SAGA, Phase.RESOLVED, write_key="resolve", tool="book_hotel", call_id="h1",
                             payload={"target_seq": intent.seq, "target": "call",
                                      "answer": "not_run"})
    close = await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="close", fence=r2.seq,
                                 payload={"status": "COMPENSATED"})
    return {"r1": r1.seq, "r2": r2.seq, "intent": intent.seq, "close": close.seq}


def _outcome(seqs: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"write_key": "e1", "tool": "book_hotel", "call_id": "h1",
            "payload": {"intent_seq": seqs["intent"], "result": "H1"}, **fields}


async def test_a_closed_saga_refuses_all_but_its_calls_own_late_outcome(journal):
    seqs = await _closed_with_a_call_in_flight(journal)
    refused = [
        _outcome(seqs),  # not late, unfenced
        _outcome(seqs, fence=seqs["r2"]),  # fenced by the closing run (checked: closed)
        _outcome(seqs, fence=seqs["r2"], late=True),  # late, but not under its INTENT's fence
        {**_outcome(seqs, fence=seqs["r1"], late=True),  # names an entry that is no INTENT
         "payload": {"intent_seq": seqs["r1"], "result": "H1"}},
    ]
    for fields in refused:
        with pytest.raises(JournalClosedError, match="INTENT's own fence"):
            await journal.append(SAGA, Phase.EXECUTED, **fields)
    with pytest.raises(JournalClosedError):  # an undo's late outcome is not a call's
        await journal.append(SAGA, Phase.COMPENSATED, write_key="u1", tool="book_hotel",
                             call_id="h1", fence=seqs["r1"], late=True,
                             payload={"target_seq": seqs["intent"], "compensating_seq": 3})
    assert len(await journal.entries(SAGA)) == seqs["close"]  # nothing written

    late = await journal.append(SAGA, Phase.EXECUTED, **_outcome(seqs, fence=seqs["r1"], late=True))
    assert late.seq == seqs["close"] + 1 and late.payload["late"] is True
    again = await journal.append(SAGA, Phase.EXECUTED, **_outcome(seqs, fence=seqs["r1"], late=True))
    assert again.seq == late.seq  # a retry of the same write returns the stored entry
    entries = await journal.entries(SAGA)
    assert reopened_by(entries) == (seqs["close"], late.seq) and not is_closed(entries)
    (verdict,) = await verify_journal(journal, SAGA)
    assert verdict.ok, verdict

    # Reopened: a recovery takes it and closes it again; then it is closed like any saga.
    r3 = await journal.append(SAGA, Phase.RUN_STARTED, write_key="run3", payload={"holder": "c"},
                              expected_seq=late.seq)
    await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="close2", fence=r3.seq,
                         payload={"status": "COMPENSATED"})
    entries = await journal.entries(SAGA)
    assert is_closed(entries) and reopened_by(entries) is None
    (verdict,) = await verify_journal(journal, SAGA)
    assert verdict.ok, verdict
    with pytest.raises(JournalClosedError):
        await journal.append(SAGA, Phase.RUN_STARTED, write_key="run4", payload={"holder": "d"})


def _chain(*specs: tuple[Phase, dict[str, Any] | None]) -> list[Any]:
    """Entries sealed in a chain, each ``(phase, payload)`` (tool entries are one call's)."""
    entries: list[Any] = []
    prev = GENESIS_HASH
    for seq, (phase, payload) in enumerate(specs, start=1):
        tool = "book_hotel" if phase in (Phase.INTENT, Phase.EXECUTED) else None
        entry = seal_entry(saga_id=SAGA, seq=seq, phase=phase, tool=tool,
                           call_id="h1" if tool else None, write_key=f"k{seq}", payload=payload,
                           recorded_at="2026-01-01T00:00:00.000000Z", prev_hash=prev)
        entries.append(entry)
        prev = entry.hash
    return entries


_BEFORE_CLOSE = (
    (Phase.SAGA_OPENED, {"metadata": {}}),
    (Phase.RUN_STARTED, {"holder": "a"}),
    (Phase.INTENT, {"args": {}, "fence": 2}),
    (Phase.RUN_STARTED, {"holder": "b"}),
    (Phase.RESOLVED, {"target_seq": 3, "target": "call", "answer": "not_run"}),
    (Phase.SAGA_CLOSED, {"status": "COMPENSATED", "fence": 4}),
)
_LATE = (Phase.EXECUTED, {"intent_seq": 3, "fence": 2, "late": True})


@pytest.mark.parametrize("after", [
    [(Phase.EXECUTED, {"intent_seq": 3})],
    [(Phase.EXECUTED, {"intent_seq": 3, "fence": 4, "late": True})],
    [(Phase.RUN_STARTED, {"holder": "c"})],
    [_LATE, (Phase.RUN_STARTED, {"holder": "c"}), (Phase.SAGA_CLOSED, {"status": "COMPENSATED", "fence": 8}),
     (Phase.RUN_STARTED, {"holder": "d"})],
], ids=["not-late", "late-under-another-fence", "a-run", "after-the-second-close"])
def test_verify_reports_any_other_entry_after_a_close(after):
    entries = _chain(*_BEFORE_CLOSE, *after)
    result = verify_entries(SAGA, entries)
    assert not result.ok and result.fault is ChainFault.AFTER_CLOSE
    assert result.bad_seq == len(entries)


def test_verify_accepts_a_late_outcome_after_the_close_and_a_second_close():
    entries = _chain(*_BEFORE_CLOSE, _LATE, (Phase.RUN_STARTED, {"holder": "c"}),
                     (Phase.SAGA_CLOSED, {"status": "COMPENSATED", "fence": 8}))
    assert verify_entries(SAGA, entries).ok
    assert verify_entries(SAGA, entries[:7]).ok


async def test_under_a_keyring_a_late_entry_counts_only_under_its_runs_key(tmp_path):
    """A late outcome tagged by another key than the one that tagged its run's RUN_STARTED is
    refused by verification (the keyring allows both keys as run writers)."""
    for key_id in ("writer-1", "writer-2"):
        generate_key(tmp_path / "keys", key_id)
    run_key = Keyring.load(tmp_path / "keys", signing_key_id="writer-1")
    other_key = Keyring.load(tmp_path / "keys", signing_key_id="writer-2")
    for signer, ok in ((other_key, False), (run_key, True)):
        journal = InMemoryJournal()
        run = signing_view(journal, run_key)
        await run.append(SAGA, Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        r1 = await run.append(SAGA, Phase.RUN_STARTED, write_key="run1", payload={"holder": "a"})
        intent = await run.append(SAGA, Phase.INTENT, write_key="i1", tool="book_hotel",
                                  call_id="h1", fence=r1.seq, payload={"args": {}})
        await run.append(SAGA, Phase.RUN_STARTED, write_key="run2", payload={"holder": "b"})
        late = await signing_view(journal, signer).append(
            SAGA, Phase.EXECUTED, **_outcome({"intent": intent.seq}, fence=r1.seq, late=True))
        verdict, _ = await Evidence(keyring=run_key).checked_entries(journal, SAGA)
        assert verdict.ok is ok, verdict
        if not ok:
            assert verdict.fault is ChainFault.BAD_SIGNATURE and verdict.bad_seq == late.seq
            assert "only under its run's key" in verdict.detail

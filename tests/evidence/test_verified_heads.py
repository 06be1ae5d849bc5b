"""A saga reopened for its next run in the same process hashes only its new entries
(``core.evidence.VerifiedHeads``, ``core.chain.verify_entries``' ``known``; issue 37), and still
refuses to act on one edited meanwhile: any entry changed since, in its bytes or in a column,
ends the identical prefix and is hashed and checked again. On a SQLite file and a PostgreSQL
schema, edited directly with SQL as an attacker with write access would (tests/evidence/tamper.py)."""

from __future__ import annotations

import dataclasses

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.core import chain as chain_module
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.errors import EvidenceError

from ..sdk.helpers import agent, scripted
from .tamper import edit_entries, sql


@function_tool
@compensable(undo=lambda ctx: None)
def hold(seat: str) -> str:
    """Hold ``seat``."""
    return f"held {seat}"


def one_call(i: int):
    return agent(scripted([("hold", {"seat": f"{i}A"}, f"c{i}")], "done"), hold)


async def _three_runs(s: Sagacity) -> str:
    saga_id = None
    for i in range(3):
        result = await s.run(one_call(i), "go", saga_id=saga_id, close=False)
        assert result.status is SagaStatus.OPEN, result.exception  # close=False: kept open
        saga_id = result.saga_id
    return saga_id


async def test_the_next_run_hashes_only_the_new_entries(journal_db, monkeypatch):
    walked: list[int] = []
    real = chain_module._verify_chain

    def counting(saga_id, entries, start=0):
        walked.append(len(entries) - start)
        return real(saga_id, entries, start)

    monkeypatch.setattr(chain_module, "_verify_chain", counting)
    s = Sagacity(journal_db)
    try:
        saga_id = await _three_runs(s)
        entries = await s.journal.entries(saga_id)
        walked.clear()
        await s.run(one_call(9), "go", saga_id=saga_id, close=False)
        # the reopening walked only what the third run wrote after its own verification
        assert walked and walked[0] < len(entries)
        assert verify_entries(saga_id, await s.journal.entries(saga_id)).ok
    finally:
        await s.aclose()


@pytest.mark.parametrize("edit", ["bytes", "column"])
async def test_an_entry_edited_between_runs_is_refused_by_the_same_process(journal_db, edit):
    s = Sagacity(journal_db)
    try:
        saga_id = await _three_runs(s)
        if edit == "bytes":  # the second entry's hashed bytes, its stored hash left as it was
            (seq,) = edit_entries(journal_db, saga_id,
                                  lambda o: {**o, "recorded_at": "2020-01-01T00:00:00.000000Z"}
                                  if o["seq"] == 2 else None)
        else:  # a column only: the bytes and the hash untouched
            seq = 3
            sql(journal_db, "UPDATE sagacity_journal SET tool = ? WHERE saga_id = ? AND seq = ?",
                ("other", saga_id, seq))
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.run(one_call(9), "go", saga_id=saga_id, close=False)
    finally:
        await s.aclose()


async def test_known_prefix_gives_the_full_walks_result_and_still_checks_the_rest(tmp_path):
    s = Sagacity(str(tmp_path / "j.db"))
    try:
        saga_id = await _three_runs(s)
        entries = await s.journal.entries(saga_id)
    finally:
        await s.aclose()
    full = verify_entries(saga_id, entries)
    assert full.ok
    for known in (1, 4, len(entries)):
        assert verify_entries(saga_id, entries, known=known) == full
    broken = [*entries[:-1], dataclasses.replace(entries[-1], prev_hash="0" * 64)]
    result = verify_entries(saga_id, broken, known=len(entries) - 1)
    assert not result.ok and result.bad_seq == len(entries)

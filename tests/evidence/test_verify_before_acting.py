"""Verify before acting (issue 8, item 1): every path that acts on a saga's past refuses,
naming the first bad seq, when the saga's chain does not verify; nothing runs and nothing is
undone. Each case runs on a SQLite file and on a PostgreSQL schema (the ``journal_db`` fixture),
edited directly with SQL (tests/evidence/tamper.py: sqlite3, or psycopg), as an attacker with
write access to the database would."""

from __future__ import annotations

import pytest
from agents import function_tool
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.errors import EvidenceError
from sagacity_agents.saga import compensate
from sagacity_agents.cli import cli
from sagacity_agents.core.approval import args_hash

from ..sdk import wire_app
from ..sdk.helpers import agent, scripted
from .tamper import edit_entries, sql

WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")


async def paused_saga(db: str) -> tuple[str, str]:
    s = Sagacity(db)
    try:
        result = await s.run(wire_app.paused_agent(WIRE), "go")
        assert result.status is SagaStatus.AWAITING_APPROVAL
        return result.saga_id, result.approvals[0].request_id
    finally:
        await s.aclose()


def to_5000(obj):
    payload = obj.get("payload")
    if isinstance(payload, dict) and isinstance(payload.get("args"), dict) and payload["args"].get("amount") == 5:
        new_args = {**payload["args"], "amount": 5000}
        return {**obj, "payload": {**payload, "args": new_args, "args_hash": args_hash(new_args)}}
    return None


@pytest.mark.case("E-01")
async def test_edited_request_snapshot_and_entries_are_refused_at_resume(journal_db):
    """E-01: the approval request, the snapshot and the journal entries of a paused saga are
    edited from 5 to 5000 (hashes not re-sealed) after the human approved 5: resume is refused
    with the first edited seq named, and nothing is paid."""
    db = journal_db
    saga_id, request_id = await paused_saga(db)
    s = Sagacity(db)
    await s.approve(request_id, approver="alice")
    await s.aclose()
    new_args = {"amount": 5000, "currency": "USD", "to": "acct-9"}
    sql(db, "UPDATE sagacity_approval_requests SET args = ?, args_hash = ? WHERE request_id = ?",
        ('{"amount":5000,"currency":"USD","to":"acct-9"}', args_hash(new_args), request_id))
    (snapshot,) = sql(db, "SELECT snapshot FROM sagacity_snapshots WHERE saga_id = ?", (saga_id,))[0]
    edited_snapshot = snapshot.replace('\\"amount\\": 5', '\\"amount\\": 5000')
    assert edited_snapshot != snapshot  # the edit took: the refusal is not for want of it
    sql(db, "UPDATE sagacity_snapshots SET snapshot = ? WHERE saga_id = ?", (edited_snapshot, saga_id))

    def edit(obj):
        changed = to_5000(obj)
        if obj["phase"] == "APPROVED":
            changed = {**obj, "payload": {**obj["payload"], "args_hash": args_hash(new_args)}}
        return changed

    edited = edit_entries(db, saga_id, edit)
    s = Sagacity(db)
    try:
        with pytest.raises(EvidenceError, match=f"first bad seq {edited[0]}") as caught:
            await s.resume(saga_id, wire_app.resumed_agent())
        assert caught.value.bad_seq == edited[0] and caught.value.fault == "hash mismatch"
    finally:
        await s.aclose()
    assert wire_app.executions() == []


@pytest.mark.case("E-02")
async def test_rejection_rewritten_as_approval_is_refused(journal_db):
    """E-02: a REJECTED decision rewritten as APPROVED in the stored entry (and in the store):
    resume is refused, the rejected call never runs."""
    db = journal_db
    saga_id, request_id = await paused_saga(db)
    s = Sagacity(db)
    await s.reject(request_id, approver="alice", reason="unknown payee")
    await s.aclose()
    sql(db, "UPDATE sagacity_approval_requests SET decision = 'approved' WHERE request_id = ?", (request_id,))
    (seq,) = edit_entries(db, saga_id, lambda o: {**o, "phase": "APPROVED"} if o["phase"] == "REJECTED" else None)
    s = Sagacity(db)
    try:
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.resume(saga_id, wire_app.resumed_agent())
    finally:
        await s.aclose()
    assert wire_app.executions() == []


def bookings_app(world: dict[str, list[str]]):
    @function_tool
    @compensable(undo=lambda ctx: world[ctx.undo_data["customer"]].remove(ctx.undo_data["booking"]))
    def book_room(customer: str, room: str) -> str:
        from sagacity_agents import record_undo_data

        record_undo_data({"customer": customer, "booking": room})
        world.setdefault(customer, []).append(room)
        return f"booked {room}"

    return book_room


async def executed_saga(db: str, world) -> str:
    book_room = bookings_app(world)
    s = Sagacity(db)
    try:
        model = scripted([("book_room", {"customer": "ana", "room": "101"}, "1")], "ok")
        result = await s.run(agent(model, book_room), "go", close=False)
        return result.saga_id
    finally:
        await s.aclose()


def other_customer(obj):
    payload = obj.get("payload")
    if obj["phase"] == "EXECUTED" and isinstance(payload, dict):
        return {**obj, "payload": {**payload, "undo_data": {"customer": "bob", "booking": "202"}}}
    return None


@pytest.mark.case("E-03")
async def test_undo_data_aimed_at_another_customer_is_refused_by_recover(journal_db):
    """E-03: an EXECUTED entry's undo data changed to another customer's booking: recover is
    refused (EvidenceError naming the seq), nobody's booking is cancelled."""
    db = journal_db
    world = {"bob": ["202"]}
    saga_id = await executed_saga(db, world)
    (seq,) = edit_entries(db, saga_id, other_customer)
    s = Sagacity(db)
    try:
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.recover(saga_id, agent(scripted(), bookings_app(world)))
        # The core compensation step refuses on its own too.
        with pytest.raises(EvidenceError):
            await compensate(s.journal, saga_id, {})
    finally:
        await s.aclose()
    assert world == {"bob": ["202"], "ana": ["101"]}
    entries = await _entries(db, saga_id)
    assert not any(e.phase is Phase.COMPENSATING for e in entries)


async def _entries(db, saga_id):
    s = Sagacity(db)
    try:
        return await s.journal.entries(saga_id)
    finally:
        await s.aclose()


@pytest.mark.case("E-03")
def test_cli_recover_exits_non_zero(journal_db, monkeypatch):
    """E-03 through `sagacity saga recover`: exit status non-zero, the seq named, nothing undone."""
    import asyncio
    import sys
    import types

    db = journal_db
    world = {"bob": ["202"]}
    saga_id = asyncio.run(executed_saga(db, world))
    (seq,) = edit_entries(db, saga_id, other_customer)
    module = types.ModuleType("e03_app")
    module.app = agent(scripted(), bookings_app(world))
    monkeypatch.setitem(sys.modules, "e03_app", module)
    result = CliRunner().invoke(cli, ["saga", "recover", saga_id, "--app", "e03_app:app", "--db", db])
    assert result.exit_code != 0
    assert f"first bad seq {seq}" in result.output
    assert world == {"bob": ["202"], "ana": ["101"]}


async def test_run_again_close_and_decide_refuse_an_edited_saga(journal_db):
    """A further run on the saga id, close_saga and approve all verify first."""
    db = journal_db
    world: dict[str, list[str]] = {}
    saga_id = await executed_saga(db, world)
    (seq,) = edit_entries(db, saga_id, other_customer)
    s = Sagacity(db)
    try:
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.run(agent(scripted("ok"), bookings_app(world)), "again", saga_id=saga_id)
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.close_saga(saga_id)
    finally:
        await s.aclose()
    paused_id, request_id = await paused_saga(db)
    (seq,) = edit_entries(db, paused_id, to_5000)
    s = Sagacity(db)
    try:
        with pytest.raises(EvidenceError, match=f"first bad seq {seq}"):
            await s.approve(request_id, approver="alice")
    finally:
        await s.aclose()

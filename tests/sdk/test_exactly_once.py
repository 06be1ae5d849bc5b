"""E-04: one APPROVED runs an irreversible call once, whatever the approval store says later
(issue 8 item 2). The journal's CONSUMED entry and the call's INTENT decide, not the store. On
memory, SQLite and PostgreSQL: the store is reset with SQL on the two databases
(tests/evidence/tamper.py), as someone with write access to them would."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, irreversible
from sagacity_agents.backends import InMemoryApprovalStore, Phase
from sagacity_agents.errors import ApprovalError
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.stores import approval_store_for, open_journal

from ..evidence.tamper import sql

from .helpers import agent, scripted

DEPOSITS: list[tuple[int, str]] = []


@function_tool(needs_approval=True)
@irreversible
def deposit(amount: int, account: str) -> str:
    """Move money to an account (irreversible)."""
    DEPOSITS.append((amount, account))
    return f"deposited {amount}"


def paying() -> Any:
    return agent(scripted([("deposit", {"amount": 5000, "account": "acct-7"}, "d1")], "done"), deposit)


def finishing() -> Any:
    return agent(scripted("done", "done"), deposit)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request, tmp_path) -> tuple[str | None, Any, Any, Sagacity]:
    """(SQLite path, PostgreSQL URI or None for memory; journal; approval store; facade)."""
    path = {"memory": None, "sqlite": str(tmp_path / "j.db")}.get(request.param)
    if request.param == "postgres":
        path = request.getfixturevalue("pg_uri")
    journal = open_journal(path or ":memory:")
    store = approval_store_for(journal)
    return path, journal, store, Sagacity(journal, approvals=store)


async def reset_consumed(store: Any, path: str | None, request_id: str) -> None:
    """What someone with write access to the approval store does: un-consume the request."""
    if path is None:
        stored = await store.get(request_id)
        store._requests[request_id] = dataclasses.replace(stored, consumed_at=None)  # noqa: SLF001
        return
    sql(path, "UPDATE sagacity_approval_requests SET consumed_at = NULL WHERE request_id = ?", (request_id,))


@pytest.mark.case("E-04")
async def test_reset_consumed_flag_and_old_snapshot_cannot_run_an_approved_call_again(backend):
    """E-04: an open saga (``close=False``) pays 5000 to acct-7 on one APPROVED; the store's
    ``consumed_at`` is then reset and the old snapshot re-inserted. A second resume is refused
    (CONSUMED in the journal), and the old state approved through the SDK and run on the saga
    fails closed (the INTENT already used the approval): the deposit ran exactly once."""
    DEPOSITS.clear()
    path, journal, store, s = backend
    try:
        paused = await s.run(paying(), "pay", close=False)
        assert paused.status is SagaStatus.AWAITING_APPROVAL
        (request,) = paused.approvals
        old_snapshot = await store.load_snapshot(paused.saga_id)
        old_state = paused.run_result.to_state()
        await s.approve(request.request_id, approver="alice", reason="invoice 7")
        resumed = await s.resume(paused.saga_id, finishing(), close=False)
        assert resumed.status is SagaStatus.OPEN
        assert DEPOSITS == [(5000, "acct-7")]

        # The attack: un-consume the request and put the old snapshot back.
        await reset_consumed(store, path, request.request_id)
        await store.save_snapshot(paused.saga_id, old_snapshot)
        assert (await store.get(request.request_id)).consumed_at is None
        with pytest.raises(ApprovalError, match="already consumed .CONSUMED in the journal"):
            await s.resume(paused.saga_id, finishing(), close=False)
        assert DEPOSITS == [(5000, "acct-7")]

        # The old RunState approved through the SDK's own API, run on the saga (a fresh store:
        # no pending request stops the run, only the journal can).
        for item in old_state.get_interruptions():
            old_state.approve(item)
        replay = await Sagacity(journal, approvals=InMemoryApprovalStore()).run(
            finishing(), old_state, saga_id=paused.saga_id, close=False)
        assert replay.status is not SagaStatus.COMPLETED
        assert DEPOSITS == [(5000, "acct-7")]  # exactly once

        entries = await journal.entries(paused.saga_id)
        assert verify_entries(paused.saga_id, entries).ok
        deposit_entries = [e for e in entries if e.tool == "deposit"]
        intents = [e for e in deposit_entries if e.phase is Phase.INTENT]
        assert len(intents) == 1 and intents[0].payload["request_id"] == request.request_id
        assert len([e for e in deposit_entries if e.phase is Phase.CONSUMED]) == 1
        (refused,) = [e for e in deposit_entries if e.phase is Phase.FAILED]
        assert refused.payload["not_run"] is True
        assert f"approval {request.request_id} was already used (INTENT seq {intents[0].seq})" \
            in refused.payload["error"]
    finally:
        await s.aclose()


async def test_an_approved_call_killed_after_consumed_before_intent_is_named_by_recovery(backend):
    """A process that consumed the approval (CONSUMED journaled) and died before the INTENT: the
    deposit never ran; recovery names it ("approved, never ran"), runs nothing, and closes."""
    from sagacity_agents.saga import Saga

    DEPOSITS.clear()
    path, journal, store, s = backend
    try:
        paused = await s.run(paying(), "pay")
        (request,) = paused.approvals
        await s.approve(request.request_id, approver="alice")
        await s.desk.restore(Saga(journal, paused.saga_id), finishing())  # consumed... then killed
        recovered = await s.recover(paused.saga_id, finishing())
        assert DEPOSITS == []
        (named,) = recovered.report.approved_not_run
        consumed = next(e for e in await journal.entries(paused.saga_id) if e.phase is Phase.CONSUMED)
        assert (named.seq, named.tool, named.call_id) == (consumed.seq, "deposit", "d1")
        assert request.request_id in named.detail and "never ran" in named.detail
        assert recovered.status is SagaStatus.COMPENSATED
        closed = (await journal.entries(paused.saga_id))[-1]
        assert closed.payload["report"]["approved_not_run"][0]["seq"] == consumed.seq
    finally:
        await s.aclose()

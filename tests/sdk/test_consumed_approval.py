"""Every path that can run an irreversible call checks a consumed approval recorded in the journal
(issue 7 item 4, F-11)."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.exceptions import AgentsException
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaRunHooks, SagaStatus, irreversible, protect_tool
from sagacity_agents.backends import (
    InMemoryApprovalStore,
    InMemoryJournal,
    Phase,
    SqliteApprovalStore,
    SqliteJournal,
)
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.sdk.approvals import ApprovalDesk

pytestmark = pytest.mark.case("F-11")

WIRES: list[tuple[int, str]] = []


@function_tool(needs_approval=True)
@irreversible
def wire(amount: int, iban: str) -> str:
    """Send money (decorated)."""
    WIRES.append((amount, iban))
    return f"sent {amount}"


def _plain_wire(amount: int, iban: str) -> str:
    """Send money (a tool we cannot decorate)."""
    WIRES.append((amount, iban))
    return f"sent {amount}"


PROTECTED = protect_tool(function_tool(_plain_wire, name_override="wire", needs_approval=True),
                         reversibility="irreversible")


def make_agent(kind: str, *steps: Any) -> Agent[Any]:
    model = ScriptedModel()
    for step in steps:
        model.enqueue(step)
    return Agent(name="payer", model=model, tools=[wire if kind == "decorated" else PROTECTED])


def pausing(kind: str) -> Agent[Any]:
    return make_agent(kind, [function_call("wire", {"amount": 2500, "iban": "PT50"}, call_id="w1")],
                      [assistant_message("done")])


def resuming(kind: str) -> Agent[Any]:
    return make_agent(kind, [assistant_message("done")], [assistant_message("done")])


async def _run(path: str, agent: Agent[Any], input: Any, hooks: SagaRunHooks, **kw: Any) -> Any:
    if path == "hooks-streamed":
        run = Runner.run_streamed(agent, input, hooks=hooks, **kw)
        async for _ in run.stream_events():
            pass
        return run
    return await Runner.run(agent, input, hooks=hooks, **kw)


async def pause(path: str, kind: str, journal: Any, store: Any) -> tuple[str, Any, Any]:
    """Run until the wire pauses; returns (saga id, the request, the run's RunState)."""
    if path == "facade":
        result = await Sagacity(journal, approvals=store).run(pausing(kind), "pay")
        assert result.status is SagaStatus.AWAITING_APPROVAL
        return result.saga_id, result.approvals[0], result.run_result.to_state()
    agent = pausing(kind)
    async with SagaRunHooks(journal, agent=agent, approvals=store) as hooks:
        result = await _run(path, agent, "pay", hooks)
        paused = await hooks.request_approvals(result)
    assert hooks.status is SagaStatus.AWAITING_APPROVAL
    return hooks.saga_id, paused.requests[0], result.to_state()


async def resume_checked(path: str, kind: str, journal: Any, store: Any, saga_id: str) -> SagaStatus:
    """The library's resume: verify, consume, journal CONSUMED, then run."""
    if path == "facade":
        return (await Sagacity(journal, approvals=store).resume(saga_id, resuming(kind))).status
    agent = resuming(kind)
    async with SagaRunHooks(journal, agent=agent, saga_id=saga_id, approvals=store) as hooks:
        state = await hooks.resume_state(context=None)
        await _run(path, agent, state, hooks)
    assert hooks.status is not None
    return hooks.status


async def run_sdk_approved(path: str, kind: str, journal: Any, saga_id: str, state: Any) -> SagaStatus:
    """A RunState approved through the SDK's own API, run on the saga around our resume."""
    agent = resuming(kind)
    if path == "facade":
        # A fresh store: no pending request stops the run, only the journal can.
        result = await Sagacity(journal, approvals=InMemoryApprovalStore()).run(agent, state, saga_id=saga_id)
        return result.status
    try:
        async with SagaRunHooks(journal, agent=agent, saga_id=saga_id) as hooks:
            await _run(path, agent, state, hooks)
    except AgentsException:
        pass  # the protected tool's guardrail stops the run: compensated on the way out
    assert hooks.status is not None
    return hooks.status


@pytest.mark.parametrize("approval", ["consumed", "sdk-approve", "always-approve", "stored-snapshot"])
@pytest.mark.parametrize("path", ["facade", "hooks", "hooks-streamed"])
@pytest.mark.parametrize("kind", ["decorated", "protected"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_irreversible_body_runs_only_on_a_journaled_consumed_approval(
    tmp_path, backend, kind, path, approval
):
    """F-11: tool kind (decorated, protect_tool) x entry path (facade, SagaRunHooks with
    Runner.run, streamed) x how the state was approved (our resume, the SDK's approve,
    always_approve, the stored snapshot approved by hand after a human's APPROVED): the body runs
    exactly once on our resume and never otherwise (FAILED "no consumed approval")."""
    WIRES.clear()
    if backend == "memory":
        journal, store = InMemoryJournal(), InMemoryApprovalStore()
    else:
        journal, store = SqliteJournal(tmp_path / "j.db"), SqliteApprovalStore(tmp_path / "j.db")
    try:
        saga_id, request, state = await pause(path, kind, journal, store)
        assert WIRES == []
        if approval == "consumed":
            await ApprovalDesk(journal, store).decide(request.request_id, approve=True, approver="alice")
            status = await resume_checked(path, kind, journal, store, saga_id)
        else:
            if approval == "stored-snapshot":
                # A human approved (APPROVED journaled), but the snapshot is run around our resume.
                await ApprovalDesk(journal, store).decide(request.request_id, approve=True, approver="alice")
                state = await RunState.from_string(resuming(kind), await store.load_snapshot(saga_id))
            for item in state.get_interruptions():
                state.approve(item, always_approve=approval == "always-approve")
            status = await run_sdk_approved(path, kind, journal, saga_id, state)
        entries = await journal.entries(saga_id)
        wire_entries = [e for e in entries if e.tool == "wire"]
        if approval == "consumed":
            assert status is SagaStatus.COMPLETED
            assert WIRES == [(2500, "PT50")]  # exactly once
            assert [e.phase for e in wire_entries] == [
                Phase.AWAITING_APPROVAL, Phase.APPROVED, Phase.CONSUMED, Phase.INTENT, Phase.EXECUTED]
            assert wire_entries[3].payload["request_id"] == request.request_id
        else:
            assert WIRES == []  # the body never ran
            assert status is not SagaStatus.COMPLETED
            assert not any(e.phase in (Phase.INTENT, Phase.CONSUMED) for e in wire_entries)
            (failed,) = [e for e in wire_entries if e.phase is Phase.FAILED]
            assert "no consumed approval" in failed.payload["error"]
            assert failed.payload["not_run"] is True
        assert verify_entries(saga_id, entries).ok
    finally:
        await journal.close()
        await store.close()

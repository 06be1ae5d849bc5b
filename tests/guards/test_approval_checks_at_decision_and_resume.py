"""T-02, approvals (sdk.approvals): each check at decision and resume time reached alone (every
earlier check passes), told apart by ``ApprovalError.code``."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.errors import ApprovalError
from sagacity_agents.saga import Saga
from sagacity_agents.backends.memory.approvals import InMemoryApprovalStore
from sagacity_agents.core.approval import args_hash

from ..sdk import wire_app

pytestmark = pytest.mark.case("T-02")

WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")
OTHER_ARGS = {"amount": 5000, "to": "acct-9", "currency": "USD"}


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    monkeypatch.setattr(wire_app, "LEDGER", tmp_path / "ledger.txt")


async def paused(*calls):
    s = Sagacity(InMemoryJournal(), approvals=InMemoryApprovalStore())
    result = await s.run(wire_app.paused_agent(*(calls or (WIRE,))), "go")
    assert result.status is SagaStatus.AWAITING_APPROVAL
    return s, result.saga_id, result.approvals[0]


def edit(s, request, **fields):
    """A database writer edits the stored request."""
    s.approvals._requests[request.request_id] = dataclasses.replace(request, **fields)


async def refused_decision(s, request_id, code, *, approve=True, approver="alice"):
    with pytest.raises(ApprovalError) as refused:
        await s.desk.decide(request_id, approve=approve, approver=approver)
    assert refused.value.code == code, refused.value


async def refused_resume(s, saga_id, code):
    with pytest.raises(ApprovalError) as refused:
        await s.desk.restore(Saga(s.journal, saga_id), wire_app.resumed_agent())
    assert refused.value.code == code, refused.value
    assert wire_app.executions() == []
    return refused.value


# --- at decision time -----------------------------------------------------------------------

async def test_decide_each_store_check_alone():
    s, _, request = await paused()
    await refused_decision(s, request.request_id, "NO_APPROVER", approver="")
    await refused_decision(s, "nope", "UNKNOWN_REQUEST")
    edit(s, request, consumed_at="2026-01-01T00:00:00.000000Z")
    await refused_decision(s, request.request_id, "REQUEST_CONSUMED")
    edit(s, request, args_hash="")
    await refused_decision(s, request.request_id, "NO_ARGS_HASH")
    edit(s, request)
    s.desk.clock = lambda: dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    await refused_decision(s, request.request_id, "REQUEST_EXPIRED")


async def test_a_decision_is_final_and_the_same_one_again_writes_nothing():
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    count = len(await s.journal.entries(saga_id))
    again = await s.desk.decide(request.request_id, approve=True, approver="bob")
    assert again.approver == "alice" and len(await s.journal.entries(saga_id)) == count
    await refused_decision(s, request.request_id, "DECISION_CHANGED", approve=False)


async def test_decide_refuses_a_closed_saga():
    s, saga_id, request = await paused()
    await s.journal.append(saga_id, Phase.SAGA_CLOSED, write_key="closed-by-hand")
    await refused_decision(s, request.request_id, "SAGA_CLOSED")


async def test_decide_refuses_a_request_the_journal_never_paused_on():
    s, _, request = await paused()
    await s.approvals.create(dataclasses.replace(request, request_id="forged"))
    await refused_decision(s, "forged", "REQUEST_NOT_JOURNALED")


async def test_decide_refuses_a_request_whose_call_was_changed_in_the_store():
    s, _, request = await paused()
    edit(s, request, call_id="w2")
    await refused_decision(s, request.request_id, "REQUEST_CALL_CHANGED")
    edit(s, request, tool="note")
    await refused_decision(s, request.request_id, "REQUEST_CALL_CHANGED")


async def test_decide_refuses_arguments_and_hash_both_changed_in_the_store():
    """The stored request is consistent in itself (arguments hash to its hash) but not the
    journaled one: only the comparison with the journaled hash can refuse it."""
    s, _, request = await paused()
    edit(s, request, args=OTHER_ARGS, args_hash=args_hash(OTHER_ARGS))
    await refused_decision(s, request.request_id, "ARGS_HASH_MISMATCH_AT_DECISION")


async def test_decide_refuses_arguments_changed_under_the_journaled_hash():
    """What a human reads (the arguments) changed, the hash left: only the re-hash refuses."""
    s, _, request = await paused()
    edit(s, request, args=OTHER_ARGS)
    await refused_decision(s, request.request_id, "REQUEST_ARGS_CHANGED")
    edit(s, request, args={"amount": float("nan")})
    await refused_decision(s, request.request_id, "REQUEST_ARGS_CHANGED")


async def test_decide_journals_the_decision_with_its_hash():
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=False, approver="alice")
    rejected = [e for e in await s.journal.entries(saga_id) if e.phase is Phase.REJECTED]
    assert [e.payload["args_hash"] for e in rejected] == [request.args_hash]
    assert (await s.approvals.get(request.request_id)).decision == "rejected"


# --- at resume time -------------------------------------------------------------------------

async def test_resume_runs_an_approved_call_once():
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    done = await s.resume(saga_id, wire_app.resumed_agent())
    assert done.status is SagaStatus.COMPLETED and wire_app.executions() == ["5 USD -> acct-9"]


async def test_resume_with_arguments_differing_from_the_request_is_refused_at_resume():
    """Snapshot untouched, decision journaled: only the request's hash was edited afterwards.
    The resume-time comparison refuses it before the decision's hash is even looked at."""
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    edit(s, await s.approvals.get(request.request_id), args_hash="c" * 64)
    await refused_resume(s, saga_id, "ARGS_HASH_MISMATCH_AT_RESUME")


async def test_resume_refuses_a_journaled_decision_for_another_hash():
    s, saga_id, request = await paused()
    await s.journal.append(saga_id, Phase.APPROVED, write_key="forged", tool="transfer", call_id="w1",
                           payload={"request_id": request.request_id, "args_hash": "d" * 64})
    await refused_resume(s, saga_id, "DECISION_HASH_MISMATCH")


async def test_resume_refuses_undecided_and_lists_them():
    s, saga_id, request = await paused()
    error = await refused_resume(s, saga_id, "UNDECIDED")
    assert request.request_id in str(error)


async def test_resume_refuses_missing_or_unreadable_or_changed_snapshots():
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    text = s.approvals._snapshots.pop(saga_id)
    await refused_resume(s, saga_id, "NO_SNAPSHOT")
    await s.approvals.save_snapshot(saga_id, "{not json")
    await refused_resume(s, saga_id, "SNAPSHOT_UNREADABLE")
    await s.approvals.save_snapshot(saga_id, text + " ")
    await refused_resume(s, saga_id, "SNAPSHOT_CHANGED")


async def test_resume_refuses_when_nothing_is_pending_or_a_request_was_revived():
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    edit(s, await s.approvals.get(request.request_id), consumed_at="2026-01-01T00:00:00.000000Z")
    await refused_resume(s, saga_id, "NOTHING_TO_RESUME")
    edit(s, await s.approvals.get(request.request_id), consumed_at=None)
    await s.desk.restore(Saga(s.journal, saga_id), wire_app.resumed_agent())
    edit(s, await s.approvals.get(request.request_id), consumed_at=None)
    await refused_resume(s, saga_id, "REQUEST_CONSUMED")


async def test_resume_refuses_a_pending_call_with_no_request_of_its_own():
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    stored = await s.approvals.get(request.request_id)
    edit(s, stored, call_id="w9")
    await refused_resume(s, saga_id, "NO_REQUEST_FOR_CALL")
    edit(s, stored, tool="note")
    await refused_resume(s, saga_id, "NO_REQUEST_FOR_CALL")


async def test_resume_refuses_a_request_without_hash_or_expired():
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    stored = await s.approvals.get(request.request_id)
    edit(s, stored, args_hash="")
    await refused_resume(s, saga_id, "NO_ARGS_HASH")
    edit(s, stored)
    s.desk.clock = lambda: dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    await refused_resume(s, saga_id, "REQUEST_EXPIRED")


async def test_resume_refuses_a_request_whose_call_is_not_in_the_snapshot():
    """A writer journals a second pause with the same snapshot hash and stores its request:
    every check passes for it but one, that the snapshot has a pending call for it."""
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    entries = await s.journal.entries(saga_id)
    pause = next(e for e in entries if e.phase is Phase.AWAITING_APPROVAL)
    await s.journal.append(saga_id, Phase.AWAITING_APPROVAL, write_key="forged-pause", tool="transfer",
                           call_id="w2", payload={**pause.payload, "request_id": "extra"})
    await s.approvals.create(dataclasses.replace(request, request_id="extra", call_id="w2"))
    await refused_resume(s, saga_id, "REQUEST_WITHOUT_CALL")


async def test_resume_consumes_each_decision_and_journals_it():
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=False, approver="alice")
    _state, grants = await s.desk.restore(Saga(s.journal, saga_id), wire_app.resumed_agent())
    assert [(g.request_id, g.approved) for g in grants] == [(request.request_id, False)]
    consumed = [e for e in await s.journal.entries(saga_id) if e.phase is Phase.CONSUMED]
    assert [e.payload["decision"] for e in consumed] == ["rejected"]
    assert (await s.approvals.get(request.request_id)).consumed_at is not None


# --- survivors of the first mutation run: each kept honest by a test of its own ------------

def _model_outputs(agent) -> list[str]:
    from ..sdk.helpers import tool_outputs

    return tool_outputs(agent.model)


@pytest.mark.parametrize(("reason", "told"), [
    ("unknown payee", "Tool execution was not approved: unknown payee"),
    (None, "Tool execution was not approved."),
])
async def test_a_rejection_tells_the_model_the_reason(reason, told):
    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=False, approver="alice", reason=reason)
    agent = wire_app.resumed_agent()
    await s.resume(saga_id, agent)
    assert _model_outputs(agent) == [told] and wire_app.executions() == []


async def test_resume_names_how_the_tool_is_declared_now():
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message

    s, saga_id, request = await paused()
    await s.desk.decide(request.request_id, approve=True, approver="alice")

    @function_tool(name_override="transfer", needs_approval=True)
    def transfer(amount: int, to: str, currency: str = "USD") -> str:
        return "sent"

    bare = Agent(name="wire", model=ScriptedModel([[assistant_message("done")]]), tools=[transfer])
    with pytest.raises(ApprovalError) as refused:
        await s.desk.restore(Saga(s.journal, saga_id), bare)
    assert refused.value.code == "DECLARATION_CHANGED"
    assert "is declared without a saga decorator in the agent given to resume, but was irreversible" \
        in str(refused.value)


async def test_an_invalid_call_beside_a_paused_one_is_rejected_and_the_other_still_runs():
    """The model's turn held an invalid call (auto-rejected at the pause, no request) before the
    valid one: resume rejects it again and goes on to the valid one."""
    s, saga_id, request = await paused(("transfer", '{"amount": "x", "to": "acct-1"}', "w0"), WIRE)
    await s.desk.decide(request.request_id, approve=True, approver="alice")
    agent = wire_app.resumed_agent()
    done = await s.resume(saga_id, agent)
    assert done.status is SagaStatus.COMPLETED and wire_app.executions() == ["5 USD -> acct-9"]


async def test_resume_lists_every_undecided_request():
    s, saga_id, _ = await paused(WIRE, ("transfer", '{"amount": 6, "to": "acct-9"}', "w2"))
    requests = await s.approvals.list(saga_id)
    error = await refused_resume(s, saga_id, "UNDECIDED")
    assert all(r.request_id in str(error) for r in requests) and len(requests) == 2


async def test_a_decision_the_journal_refuses_is_not_recorded(monkeypatch):
    from sagacity_agents.errors import JournalWriteError

    s, _, request = await paused()

    async def refuse(*args, **kwargs):
        raise JournalWriteError("disk full")

    monkeypatch.setattr(s.desk.journal, "append", refuse)
    await refused_decision(s, request.request_id, "DECISION_NOT_JOURNALED")
    assert (await s.approvals.get(request.request_id)).decision is None


async def test_an_unencodable_call_of_an_undecorated_tool_beside_a_paused_one_is_rejected():
    """The same for a tool we could not decorate (``protect_tool``): its raw arguments have no
    canonical encoding (1e400 parses to infinity)."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import protect_tool

    sent: list[int] = []

    def pay(amount: float, iban: str) -> str:
        sent.append(amount)
        return "sent"

    tool = protect_tool(function_tool(pay, needs_approval=True), reversibility="irreversible")

    def agent(*turns):
        return Agent(name="payer", model=ScriptedModel(list(turns)), tools=[tool])

    s = Sagacity(InMemoryJournal(), approvals=InMemoryApprovalStore())
    first = await s.run(agent([function_call("pay", '{"amount": 1e400, "iban": "x"}', call_id="p0"),
                               function_call("pay", '{"amount": 7, "iban": "PT50"}', call_id="p1")],
                              [assistant_message("done")]), "go")
    assert first.status is SagaStatus.AWAITING_APPROVAL and len(first.approvals) == 1
    await s.desk.decide(first.approvals[0].request_id, approve=True, approver="alice")
    done = await s.resume(first.saga_id, agent([assistant_message("done")]))
    assert done.status is SagaStatus.COMPLETED and sent == [7]

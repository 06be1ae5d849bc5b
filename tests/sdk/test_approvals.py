"""Approvals: every way an approval can be wrong is refused (issue: human approval).

The anchor is the original's stale-approval suite; each test asserts the outcome and that the
irreversible body did (or did not) run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import os

import pytest
from agents import Runner
from agents.run_state import RunState

from sagacity_agents import SagaRunHooks, Sagacity, SagaStatus
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.errors import ApprovalError
from sagacity_agents.backends.memory.approvals import InMemoryApprovalStore
from sagacity_agents.sdk.results import Decision

from tests import forked
from . import wire_app
from .helpers import tool_outputs

WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.txt"
    monkeypatch.setattr(wire_app, "LEDGER", path)
    monkeypatch.setenv("WIRE_LEDGER", str(path))
    return path


def sagacity(**kw) -> Sagacity:
    return Sagacity(InMemoryJournal(), approvals=InMemoryApprovalStore(), **kw)


async def paused(s: Sagacity, *calls):
    calls = calls or (WIRE,)
    result = await s.run(wire_app.paused_agent(*calls), "go")
    assert result.status is SagaStatus.AWAITING_APPROVAL
    return result


async def test_pause_records_request_and_resume_runs_exactly_once():
    s = sagacity()
    result = await paused(s)
    (request,) = result.approvals
    assert request.args == {"amount": 5, "to": "acct-9", "currency": "USD"}
    assert wire_app.executions() == []
    await s.approve(request.request_id, approver="alice", reason="known payee")
    done = await s.resume(result.saga_id, wire_app.resumed_agent())
    assert done.status is SagaStatus.COMPLETED and done.final_output == "done"
    assert wire_app.executions() == ["5 USD -> acct-9"]
    entries = await s.journal.entries(result.saga_id)
    approved = next(e for e in entries if e.phase is Phase.APPROVED)
    assert approved.payload["approver"] == "alice"
    assert approved.payload["args_hash"] == request.args_hash
    assert [e.phase for e in entries if e.tool == "transfer"] == [
        Phase.AWAITING_APPROVAL, Phase.APPROVED, Phase.CONSUMED, Phase.INTENT, Phase.EXECUTED]
    consumed = next(e for e in entries if e.phase is Phase.CONSUMED)
    claimant = consumed.payload.pop("claimant")  # CONSUMED is a claim: the resume's nonce
    assert len(claimant) == 32
    fence = consumed.payload.pop("fence")  # written under the resume's run lease (core.fence)
    assert entries[fence - 1].phase is Phase.RUN_STARTED
    assert consumed.payload.pop("consumed_at") < request.expires_at  # the desk's clock, as expiry
    assert consumed.payload == {"request_id": request.request_id, "args_hash": request.args_hash,
                                "decision": "approved"}
    intent = next(e for e in entries if e.phase is Phase.INTENT and e.tool == "transfer")
    assert intent.payload["request_id"] == request.request_id


async def test_snapshot_holds_no_application_context():
    s = sagacity()
    result = await s.run(wire_app.paused_agent(WIRE), "go", context={"api_key": "sk-secret"})
    snapshot = await s.approvals.load_snapshot(result.saga_id)
    assert "sk-secret" not in snapshot


@pytest.mark.parametrize("fingerprint", ["stale", "recomputed", "deleted"])
async def test_arguments_edited_in_the_snapshot_are_refused(fingerprint):
    """The snapshot's arguments are edited everywhere after the approval; the SDK's fingerprint
    is left stale, recomputed the way the SDK computes it (it is unkeyed), or deleted."""
    from agents._tool_invocation import tool_invocation_identity  # what an attacker would use

    s = sagacity()
    result = await paused(s)
    await s.approve(result.approvals[0].request_id, approver="alice")
    text = await s.approvals.load_snapshot(result.saga_id)
    forged = text.replace('\\"amount\\": 5', '\\"amount\\": 5000').replace('\\"amount\\":5', '\\"amount\\":5000')
    assert forged != text
    data = json.loads(forged)
    calls = [i["raw_item"] for i in data["generated_items"] if i.get("type") == "tool_call_item"]
    for call_id, inv in data["context"]["tool_invocations"].items():
        if fingerprint == "deleted":
            inv.pop("fingerprint", None)
        elif fingerprint == "recomputed":
            raw = next(c for c in calls if c["call_id"] == call_id)
            inv["fingerprint"] = tool_invocation_identity(raw)[2]
    forged = json.dumps(data)
    await s.approvals.save_snapshot(result.saga_id, forged)
    with pytest.raises(ApprovalError) as refused:
        await s.resume(result.saga_id, wire_app.resumed_agent())
    # Which guard refused (T-02): the SDK refuses a snapshot without its fingerprint; any other
    # edit is caught by the snapshot's journaled hash. The arguments check behind it has a test
    # of its own (tests/guards/test_approval_checks_at_decision_and_resume.py, ARGS_HASH_MISMATCH_AT_RESUME).
    assert refused.value.code == ("SNAPSHOT_UNREADABLE" if fingerprint == "deleted" else "SNAPSHOT_CHANGED")
    assert wire_app.executions() == []


async def test_approval_inside_the_snapshot_is_not_honoured():
    """An approval made on the state before serializing, or a hand-written approvals block, is
    discarded: with no journaled decision, resume refuses."""
    s = sagacity()
    result = await paused(s)
    text = await s.approvals.load_snapshot(result.saga_id)
    state = await RunState.from_string(wire_app.resumed_agent(), text)
    state.approve(state.get_interruptions()[0])
    await s.approvals.save_snapshot(result.saga_id, state.to_string())
    with pytest.raises(ApprovalError, match="was changed"):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    assert wire_app.executions() == []


async def test_forged_sdk_approval_run_outside_resume_is_refused_at_execution():
    """Running a snapshot carrying the SDK's own approval inside a saga, bypassing resume: the
    wrapper finds no consumed approval, journals the refusal and fails the saga closed."""
    s = sagacity()
    result = await paused(s)
    agent = wire_app.resumed_agent()
    state = await RunState.from_string(agent, await s.approvals.load_snapshot(result.saga_id))
    state.approve(state.get_interruptions()[0])
    async with SagaRunHooks(s.journal, agent=agent, saga_id=result.saga_id) as hooks:
        try:
            await Runner.run(agent, state, hooks=hooks)
        except Exception:
            pass
    assert wire_app.executions() == []
    assert hooks.status is not SagaStatus.COMPLETED
    failed = [e for e in await s.journal.entries(result.saga_id) if e.phase is Phase.FAILED]
    assert "no consumed approval" in failed[0].payload["error"]


async def test_approval_of_one_request_does_not_open_another():
    s = sagacity()
    a = await paused(s)
    b = await paused(s)
    await s.approve(a.approvals[0].request_id, approver="alice")
    with pytest.raises(ApprovalError, match="no decision yet"):
        await s.resume(b.saga_id, wire_app.resumed_agent())
    # A's snapshot presented under B's saga: the pending call has no request there
    await s.approvals.save_snapshot(b.saga_id, await s.approvals.load_snapshot(a.saga_id))
    store_b = await s.approvals.list(b.saga_id)
    await s.approvals.consume([r.request_id for r in store_b], __import__("datetime").datetime.now(
        __import__("datetime").timezone.utc))
    with pytest.raises(ApprovalError, match="no unconsumed approval request"):
        await s.resume(b.saga_id, wire_app.resumed_agent())
    assert wire_app.executions() == []


async def test_resume_twice_runs_once():
    s = sagacity()
    result = await paused(s)
    await s.approve(result.approvals[0].request_id, approver="alice")
    results = await asyncio.gather(
        s.resume(result.saga_id, wire_app.resumed_agent()),
        s.resume(result.saga_id, wire_app.resumed_agent()),
        return_exceptions=True,
    )
    assert wire_app.executions() == ["5 USD -> acct-9"]
    assert sum(isinstance(r, Exception) for r in results) == 1


async def test_store_decision_without_journal_entry_is_refused():
    import datetime as dt

    s = sagacity()
    result = await paused(s)
    rid = result.approvals[0].request_id
    await s.approvals.decide(rid, "approved", "mallory", None, dt.datetime.now(dt.timezone.utc))
    with pytest.raises(ApprovalError, match="no decision yet"):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    assert wire_app.executions() == []


async def test_request_without_recorded_hash_is_refused():
    s = sagacity()
    result = await paused(s)
    request = result.approvals[0]
    store = s.approvals
    store._requests[request.request_id] = dataclasses.replace(request, args_hash="")  # noqa: SLF001
    with pytest.raises(ApprovalError, match="no recorded"):
        await s.approve(request.request_id, approver="alice")
    with pytest.raises(ApprovalError):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    assert wire_app.executions() == []


async def test_expired_request_is_refused():
    # A real wait: a run's approval desk reads the system clock (no clock to freeze reaches it).
    # The pause and the decision get 2 s (a loaded machine's margin), then the test sleeps until
    # the request's own expiry, however long the first part took.
    s = sagacity(approval_ttl=2)
    result = await paused(s)
    await s.approve(result.approvals[0].request_id, approver="alice")
    request = result.approvals[0]
    while not request.expired(dt.datetime.now(dt.UTC)):
        await asyncio.sleep(0.05)
    with pytest.raises(ApprovalError, match="expired"):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    with pytest.raises(ApprovalError, match="expired"):
        await s.approve(result.approvals[0].request_id, approver="bob")
    assert wire_app.executions() == []


async def test_rejected_request_never_runs_and_the_model_gets_the_message():
    s = sagacity()
    result = await paused(s)
    await s.reject(result.approvals[0].request_id, approver="alice", reason="unknown payee")
    agent = wire_app.resumed_agent()
    done = await s.resume(result.saga_id, agent)
    assert wire_app.executions() == []
    assert done.status is SagaStatus.COMPLETED  # default: the run goes on, saga not failed
    assert any("unknown payee" in o for o in tool_outputs(agent.model))


async def test_rejection_can_fail_the_saga():
    s = sagacity(fail_on_rejection=True)
    result = await paused(s, ("note", '{"text": "a"}', "n1"), WIRE)
    await s.reject(result.approvals[0].request_id, approver="alice", reason="no")
    done = await s.resume(result.saga_id, wire_app.resumed_agent())
    assert done.status is SagaStatus.COMPENSATED
    assert [i.tool for i in done.report.undone] == ["note"]


async def test_parallel_calls_where_only_one_needs_approval():
    s = sagacity()
    result = await paused(s, ("note", '{"text": "a"}', "n1"), WIRE)
    entries = await s.journal.entries(result.saga_id)
    assert [e.phase for e in entries if e.tool == "note"] == [Phase.INTENT, Phase.EXECUTED]
    assert len(result.approvals) == 1


async def test_two_irreversible_calls_one_decided_resume_lists_the_other():
    s = sagacity()
    second = ("transfer", '{"amount": 7, "to": "acct-2"}', "w2")
    result = await paused(s, WIRE, second)
    first_req, second_req = sorted(result.approvals, key=lambda r: r.call_id)
    await s.approve(first_req.request_id, approver="alice")
    with pytest.raises(ApprovalError, match=second_req.request_id):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    await s.approve(second_req.request_id, approver="alice")
    done = await s.resume(result.saga_id, wire_app.resumed_agent())
    assert done.status is SagaStatus.COMPLETED
    assert sorted(wire_app.executions()) == ["5 USD -> acct-9", "7 USD -> acct-2"]


async def test_irreversible_tool_outside_a_saga_still_needs_approval():
    result = await Runner.run(wire_app.paused_agent(WIRE), "go")
    assert [i.tool_name for i in result.interruptions] == ["transfer"]
    assert wire_app.executions() == []


@pytest.mark.case("C-06")
@pytest.mark.parametrize("raw", ['{"amount": "100", "to": "acct', '{"amount": NaN, "to": "acct-9"}'])
async def test_invalid_pending_call_rejected_without_asking(raw):
    """C-06 (b), (c): never hashed as {}, never shown to an approver, saga not failed."""
    s = sagacity()
    agent = wire_app.paused_agent(("transfer", raw, "w1"))
    result = await s.run(agent, "go")
    assert result.status is SagaStatus.COMPLETED and result.approvals == ()
    assert await s.approvals.list(result.saga_id) == []
    rejected = [e for e in await s.journal.entries(result.saga_id) if e.phase is Phase.REJECTED]
    assert rejected[0].payload["approver"] == "sagacity"
    assert wire_app.executions() == []


@pytest.mark.case("C-06")
async def test_approval_hash_covers_validated_values():
    """C-06 (a): the approver is shown amount 100 as an integer and currency USD filled in."""
    from sagacity_agents.core.approval import args_hash

    s = sagacity()
    result = await paused(s, ("transfer", '{"amount":"100","to":"acct-9"}', "w1"))
    (request,) = result.approvals
    assert request.args == {"amount": 100, "to": "acct-9", "currency": "USD"}
    assert request.args_hash == args_hash({"amount": 100, "currency": "USD", "to": "acct-9"})


async def test_inline_approver_completes_in_one_call():
    s = sagacity()
    seen = []

    async def approver(request):
        seen.append(request.tool)
        return Decision(True, "bot", "policy allows")

    result = await s.run(wire_app.paused_agent(WIRE), "go", approver=approver)
    assert result.status is SagaStatus.COMPLETED and seen == ["transfer"]
    assert wire_app.executions() == ["5 USD -> acct-9"]


@pytest.mark.case("C-05")
async def test_reused_decision_for_a_re_interrupted_call():
    """C-05: if the SDK interrupts again for the same not-yet-run call with the same hash, the
    consumed decision is reused instead of asking the human again; the journal (CONSUMED with no
    INTENT using it) says so, not memory, and the call still runs once."""
    from sagacity_agents.saga import Saga

    s = sagacity()
    result = await paused(s)
    (request,) = result.approvals
    await s.approve(request.request_id, approver="alice")
    await s.desk.restore(Saga(s.journal, result.saga_id), wire_app.resumed_agent())  # CONSUMED
    # The SDK interrupts again for the same call: a fresh state from the snapshot, a fresh Saga.
    state = await RunState.from_string(
        wire_app.resumed_agent(), await s.approvals.load_snapshot(result.saga_id)
    )
    saga = Saga(s.journal, result.saga_id)
    outcome = await s.desk.pause(saga, wire_app.resumed_agent(), state)
    assert outcome.requests == ()  # nobody asked again
    async with SagaRunHooks(saga, agent=wire_app.resumed_agent()) as hooks:
        await Runner.run(wire_app.resumed_agent(), outcome.state, hooks=hooks)
    assert hooks.status is SagaStatus.COMPLETED
    assert wire_app.executions() == ["5 USD -> acct-9"]
    # Used up: the journal shows the INTENT that ran under it.
    from sagacity_agents.core.grants import grant_for_call

    entries = await s.journal.entries(result.saga_id)
    assert grant_for_call(entries, tool="transfer", call_id="w1", args_hash=request.args_hash)[1] \
        .startswith(f"approval {request.request_id} was already used")


def _resume_in_subprocess(db: str, saga_id: str, ledger: str, barrier, out) -> None:
    os.environ["WIRE_LEDGER"] = ledger
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    from tests.sdk import wire_app as app

    app.LEDGER = __import__("pathlib").Path(ledger)

    async def go():
        s = Sagacity(db)
        barrier.wait()
        try:
            r = await s.resume(saga_id, app.resumed_agent(), context={"who": "proc"})
            out.put(("ok", r.status.value))
        except Exception as exc:  # noqa: BLE001
            out.put(("error", type(exc).__name__))
        await s.aclose()

    asyncio.run(go())


@pytest.mark.case("C-05")
@pytest.mark.multiprocess
async def test_two_processes_resume_concurrently_exactly_one_execution(tmp_path, ledger):
    """C-05 and the concurrency guarantee: pause here, approve, then two processes resume at the
    same instant on one SQLite file; the transfer runs exactly once (one INTENT, one EXECUTED)."""
    db = str(tmp_path / "journal.db")
    s = Sagacity(db)
    result = await paused(s)
    await s.approve(result.approvals[0].request_id, approver="alice", reason="ok")
    ctx = forked.context()
    barrier = ctx.Barrier(2)
    out = ctx.Queue()
    procs = [ctx.Process(target=_resume_in_subprocess, args=(db, result.saga_id, str(ledger), barrier, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    outcomes = sorted(out.get(timeout=5) for _ in procs)
    assert [o[0] for o in outcomes] == ["error", "ok"]
    assert wire_app.executions() == ["5 USD -> acct-9"]
    entries = await s.journal.entries(result.saga_id)
    assert [e.phase for e in entries if e.tool == "transfer"].count(Phase.INTENT) == 1
    assert [e.phase for e in entries if e.tool == "transfer"].count(Phase.EXECUTED) == 1
    await s.aclose()


async def test_recomputed_fingerprint_makes_the_bare_sdk_run_edited_arguments():
    """Control for the test above: the same forgery fools the SDK on its own (sdk-notes.md), so
    the refusal above is ours, not the SDK's."""
    from agents._tool_invocation import tool_invocation_identity

    first = await Runner.run(wire_app.paused_agent(WIRE), "go")
    state = first.to_state()
    state.approve(state.get_interruptions()[0])
    data = json.loads(state.to_string().replace('\\"amount\\": 5', '\\"amount\\": 5000'))
    calls = [i["raw_item"] for i in data["generated_items"] if i.get("type") == "tool_call_item"]
    for call_id, inv in data["context"]["tool_invocations"].items():
        raw = next(c for c in calls if c["call_id"] == call_id)
        inv["fingerprint"] = tool_invocation_identity(raw)[2]
    agent = wire_app.resumed_agent()
    forged = await RunState.from_json(agent, data)
    await Runner.run(agent, forged)
    assert wire_app.executions() == ["5000 USD -> acct-9"]


async def test_wait_for_decision_wakes_when_another_task_decides():
    s = sagacity()
    result = await paused(s)
    rid = result.approvals[0].request_id

    async def decide_later():
        await asyncio.sleep(0.05)
        await s.approve(rid, approver="alice")

    decider = asyncio.create_task(decide_later())
    decided = await s.wait_for_decision(rid, timeout=5)
    await decider
    assert decided.decision == "approved" and decided.approver == "alice"
    with pytest.raises(TimeoutError):
        other = await paused(s)
        await s.wait_for_decision(other.approvals[0].request_id, timeout=0.1)


async def test_saga_run_hooks_used_directly_do_not_close_a_paused_saga():
    """Without the facade, the hooks see that an irreversible call paused: the saga is left
    AWAITING_APPROVAL, not closed as COMPLETED."""
    journal = InMemoryJournal()
    agent = wire_app.paused_agent(WIRE)
    async with SagaRunHooks(journal, agent=agent) as hooks:
        result = await Runner.run(agent, "go", hooks=hooks)
    assert result.interruptions
    assert hooks.status is SagaStatus.AWAITING_APPROVAL
    assert (await journal.entries(hooks.saga_id))[-1].phase is not Phase.SAGA_CLOSED


async def test_a_call_injected_into_the_stored_snapshot_is_refused():
    """Someone who can edit only the snapshot store adds a compensatable call to the pending
    turn: the snapshot no longer hashes to what was journaled at pause, so nothing runs."""
    s = sagacity()
    result = await paused(s)
    await s.approve(result.approvals[0].request_id, approver="alice")
    data = json.loads(await s.approvals.load_snapshot(result.saga_id))
    injected = {"arguments": '{"text": "INJECTED"}', "call_id": "x1", "name": "note",
                "type": "function_call", "id": "x1"}
    data["model_responses"][-1]["output"].append(injected)
    await s.approvals.save_snapshot(result.saga_id, json.dumps(data))
    with pytest.raises(ApprovalError, match="was changed"):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    entries = await s.journal.entries(result.saga_id)
    assert not [e for e in entries if e.phase is Phase.INTENT]
    assert wire_app.executions() == []


async def test_a_second_different_decision_is_refused_clearly():
    s = sagacity()
    result = await paused(s)
    rid = result.approvals[0].request_id
    await s.approve(rid, approver="alice")
    again = await s.approve(rid, approver="alice")
    assert again.decision == "approved"
    with pytest.raises(ApprovalError, match="already approved by alice; a decision cannot be changed"):
        await s.reject(rid, approver="bob", reason="no")


async def test_a_streamed_run_pauses_and_resumes_like_a_plain_one():
    s = sagacity()
    async with s.run_streamed(wire_app.paused_agent(WIRE), "go") as stream:
        async for _ in stream.stream_events():
            pass
    result = stream.result
    assert result.status is SagaStatus.AWAITING_APPROVAL and len(result.approvals) == 1
    await s.approve(result.approvals[0].request_id, approver="alice")
    done = await s.resume(result.saga_id, wire_app.resumed_agent())
    assert done.status is SagaStatus.COMPLETED
    assert wire_app.executions() == ["5 USD -> acct-9"]


async def test_a_snapshot_emptied_of_its_pending_call_is_refused():
    """The pending call is turned into another call and the interruptions are cleared: the
    snapshot hash check runs whatever the snapshot claims is pending."""
    s = sagacity()
    result = await paused(s)
    await s.approve(result.approvals[0].request_id, approver="alice")
    data = json.loads(await s.approvals.load_snapshot(result.saga_id))
    for response in data["model_responses"]:
        for item in response["output"]:
            if item.get("name") == "transfer":
                item.update(name="note", arguments='{"text": "INJECTED"}', call_id="x9", id="x9")
    data["generated_items"] = [i for i in data["generated_items"] if i.get("type") != "tool_approval_item"]
    await s.approvals.save_snapshot(result.saga_id, json.dumps(data))
    with pytest.raises(ApprovalError, match="was changed|cannot be restored|no pending call"):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    assert not [e for e in await s.journal.entries(result.saga_id) if e.phase is Phase.INTENT]


async def test_resume_with_the_tool_declared_differently_is_refused():
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message

    from sagacity_agents import compensable as compensable_

    s = sagacity()
    result = await paused(s)
    await s.approve(result.approvals[0].request_id, approver="alice")

    @function_tool(name_override="transfer")
    @compensable_(undo=lambda ctx: None)
    def transfer(amount: int, to: str, currency: str = "USD") -> str:
        return "sent"

    model = ScriptedModel()
    model.enqueue([assistant_message("done")])
    swapped = Agent(name="wire", model=model, tools=[transfer, wire_app.note])
    with pytest.raises(ApprovalError, match="declared compensatable .* but was irreversible"):
        await s.resume(result.saga_id, swapped)
    assert wire_app.executions() == []


async def test_a_paused_saga_is_not_closed_or_continued_behind_its_approvals():
    from sagacity_agents.errors import SagaStateError

    s = sagacity()
    result = await paused(s)
    with pytest.raises(SagaStateError, match="waiting for approval"):
        await s.close_saga(result.saga_id)
    with pytest.raises(SagaStateError, match="waiting for approval"):
        await s.run(wire_app.resumed_agent(), "more", saga_id=result.saga_id)
    recovered = await s.recover(result.saga_id, wire_app.resumed_agent())
    assert recovered.status is SagaStatus.COMPENSATED
    with pytest.raises(ApprovalError):
        await s.approve(result.approvals[0].request_id, approver="alice")
    with pytest.raises((ApprovalError, SagaStateError)):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    assert wire_app.executions() == []


def test_an_approval_policy_callable_is_refused_for_irreversible_tools():
    from agents import function_tool

    from sagacity_agents import irreversible
    from sagacity_agents.errors import ConfigurationError

    async def only_big(ctx, params, call_id):
        return params["amount"] > 100

    @function_tool(needs_approval=only_big)
    @irreversible
    def pay(amount: int) -> str:
        return "paid"

    from .helpers import agent as make_agent, scripted

    with pytest.raises(ConfigurationError, match="needs_approval=True"):
        Sagacity(InMemoryJournal()).run_sync(make_agent(scripted("x"), pay), "go")


async def test_a_request_unconsumed_in_the_store_is_refused_by_its_consumed_entry():
    """The journal is the record: after a resume consumed a request (CONSUMED journaled),
    resetting the store's consumed flag by hand does not make it resumable again."""
    from sagacity_agents.saga import Saga

    s = sagacity()
    result = await paused(s)
    (request,) = result.approvals
    await s.approve(request.request_id, approver="alice")
    await s.desk.restore(Saga(s.journal, result.saga_id), wire_app.resumed_agent())
    stored = await s.approvals.get(request.request_id)
    s.approvals._requests[request.request_id] = dataclasses.replace(stored, consumed_at=None)  # noqa: SLF001
    with pytest.raises(ApprovalError, match="already consumed .CONSUMED in the journal"):
        await s.resume(result.saga_id, wire_app.resumed_agent())
    assert wire_app.executions() == []

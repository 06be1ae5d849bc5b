"""Issue 7, items 2 and 3: tools we cannot decorate get exactly one outcome on every SDK path, and
nested runs keep their place (F-05, F-06, F-10 and the guardrail / hook paths).

Everything runs through the SDK's real guardrail and hook machinery with ScriptedModel, on the
in-memory and SQLite journals. ``in_flight_timeout`` is set to an hour: a path that waited for it
would trip the ``asyncio.wait_for`` guard instead of finishing at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    RunHooks,
    Runner,
    ToolExecutionConfig,
    ToolGuardrailFunctionOutput,
    function_tool,
    tool_input_guardrail,
    tool_output_guardrail,
)

from sagacity_agents import (
    Sagacity,
    SagaStatus,
    compensable,
    irreversible,
    nested_agent_tool,
    protect_tool,
    read_only,
)
from sagacity_agents.backends import InMemoryApprovalStore, InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.core.compensation import SagaLedger

from .helpers import agent, phases, scripted, tool_outputs
from .nested_app import f10_agents
from tests.forked import python_command

HOUR = 3600.0
GUARD = 120.0  # seconds; only reached if a path waited for in_flight_timeout


class Desk:
    """Fresh Sagacity objects over one journal, as separate processes would open it."""

    def __init__(self, kind: str, tmp_path: Any) -> None:
        self.kind = kind
        self.path = tmp_path / "journal.db"
        self.journal = InMemoryJournal()
        self.store = InMemoryApprovalStore()
        self.opened: list[Sagacity] = []

    def fresh(self, **kw: Any) -> Sagacity:
        kw.setdefault("in_flight_timeout", HOUR)
        if self.kind == "memory":
            s = Sagacity(self.journal, approvals=self.store, **kw)
        else:
            s = Sagacity(SqliteJournal(self.path), **kw)
        self.opened.append(s)
        return s

    async def entries(self, saga_id: str) -> list[Any]:
        return await self.opened[-1].journal.entries(saga_id)

    async def aclose(self) -> None:
        for s in self.opened:
            if self.kind == "sqlite":
                await s.aclose()


@pytest.fixture(params=["memory", "sqlite"])
async def desk(request, tmp_path):
    d = Desk(request.param, tmp_path)
    yield d
    await d.aclose()


async def run(s: Sagacity, ag: Agent[Any], **kw: Any) -> Any:
    return await asyncio.wait_for(s.run(ag, "go", **kw), GUARD)


def in_doubt(entries: list[Any]) -> list[Any]:
    return SagaLedger(entries).in_doubt()


# --- F-05: the application's input guardrail rejects a protected call ---------------------------

@tool_input_guardrail
def no_big_refunds(data) -> ToolGuardrailFunctionOutput:
    import json

    if json.loads(data.context.tool_arguments or "{}").get("amount", 0) >= 500:
        return ToolGuardrailFunctionOutput.reject_content("refunds of 500 or more need a manager")
    return ToolGuardrailFunctionOutput.allow()


def refund_tool(ran: list[int], **tool_kw: Any):
    @function_tool(**tool_kw)
    def refund(order: str, amount: int) -> str:
        ran.append(amount)
        return f"refunded {amount} on {order}"

    return refund


@pytest.mark.case("F-05")
async def test_app_input_guardrail_rejects_protected_refund(desk):
    """F-05: the app's guardrail rejects refund(amount=500): no INTENT, the rejection journaled
    REFUSED with its message, the saga COMPLETED at once (today IN_DOUBT after the timeout)."""
    ran: list[int] = []
    undone: list[Any] = []
    refund = protect_tool(
        refund_tool(ran, tool_input_guardrails=[no_big_refunds]),
        reversibility="compensatable", undo=lambda ctx: undone.append(ctx.raw_args),
    )
    model = scripted([("refund", {"order": "o1", "amount": 500}, "r1")], "asked a manager")
    result = await run(desk.fresh(), agent(model, refund))
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED
    assert ran == [] and undone == []
    assert phases(entries, tool="refund") == ["REFUSED"]
    refused = next(e for e in entries if e.phase is Phase.REFUSED)
    assert refused.payload["result"] == "refunds of 500 or more need a manager"
    assert refused.payload["not_run"] is True
    assert tool_outputs(model) == ["refunds of 500 or more need a manager"]
    assert in_doubt(entries) == []


@pytest.mark.case("F-05")
async def test_allowed_refund_is_journaled_once_with_our_guardrail_last(desk):
    """The app's guardrail allows amount 20: ours (last) writes the INTENT, the output guardrail
    the EXECUTED; the protected copy keeps the app's guardrail first."""
    ran: list[int] = []
    original = refund_tool(ran, tool_input_guardrails=[no_big_refunds])
    refund = protect_tool(original, reversibility="compensatable", undo=lambda ctx: None)
    assert refund.tool_input_guardrails[0] is no_big_refunds
    assert original.tool_input_guardrails == [no_big_refunds]  # the user's tool is untouched
    model = scripted([("refund", {"order": "o1", "amount": 20}, "r1")], "done")
    result = await run(desk.fresh(), agent(model, refund))
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED and ran == [20]
    assert phases(entries, tool="refund") == ["INTENT", "EXECUTED"]
    assert next(e for e in entries if e.phase is Phase.EXECUTED).payload["result"] == "refunded 20 on o1"


@pytest.mark.case("F-05")
async def test_guardrail_raising_writes_no_intent_and_compensates_at_once(desk):
    """A guardrail of the app that raises: the run raises, no INTENT exists, nothing in doubt."""

    @tool_input_guardrail
    def stop_all(data) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.raise_exception(output_info="blocked")

    ran: list[int] = []
    refund = protect_tool(refund_tool(ran, tool_input_guardrails=[stop_all]), reversibility="no_undo")
    model = scripted([("refund", {"order": "o1", "amount": 5}, "r1")], "x")
    result = await run(desk.fresh(), agent(model, refund))
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPENSATED
    assert ran == [] and phases(entries, tool="refund") == [] and in_doubt(entries) == []


# --- F-06: pre-approval guardrails with an irreversible protected tool --------------------------

PRE_APPROVAL = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True))


@pytest.mark.case("F-06")
async def test_pre_approval_guardrails_one_intent_after_the_approval(desk):
    """F-06: exactly one INTENT, written after the APPROVED entry, one EXECUTED, COMPLETED
    (today an INTENT at pause, IN_DOUBT)."""
    ran: list[int] = []

    def build(first: bool) -> Agent[Any]:
        wire = protect_tool(refund_tool(ran, needs_approval=True), reversibility="irreversible")
        steps = ([[("refund", {"order": "o1", "amount": 70}, "w1")]] if first else []) + ["done"]
        return agent(scripted(*steps), wire)

    paused = await run(desk.fresh(), build(True), run_config=PRE_APPROVAL)
    assert paused.status is SagaStatus.AWAITING_APPROVAL and ran == []
    assert phases(await desk.entries(paused.saga_id)) == []
    (request,) = paused.approvals
    s = desk.fresh()
    await s.approve(request.request_id, approver="ana")
    result = await asyncio.wait_for(
        s.resume(paused.saga_id, build(False), run_config=PRE_APPROVAL), GUARD
    )
    entries = await desk.entries(paused.saga_id)
    assert result.status is SagaStatus.COMPLETED, result
    assert ran == [70]
    assert phases(entries) == ["INTENT", "EXECUTED"]
    order = [e.phase for e in entries if e.phase in (Phase.APPROVED, Phase.INTENT)]
    assert order == [Phase.APPROVED, Phase.INTENT]


@pytest.mark.case("F-06")
async def test_protected_irreversible_without_consumed_grant_never_runs(desk):
    """The protected path checks the consumed approval too: a snapshot approved through the
    SDK's own API (no journaled decision) runs nothing."""
    ran: list[int] = []
    wire = protect_tool(refund_tool(ran, needs_approval=True), reversibility="irreversible")
    ag = agent(scripted([("refund", {"order": "o1", "amount": 70}, "w1")], "done"), wire)
    from sagacity_agents import SagaRunHooks

    s = desk.fresh()
    async with SagaRunHooks(s.journal, agent=ag, close=False) as hooks:
        first = await Runner.run(ag, "go", hooks=hooks)
        state = first.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        hooks.pending_approvals = False
        with pytest.raises(Exception):
            await Runner.run(ag, state, hooks=hooks)
    entries = await s.journal.entries(hooks.saga_id)
    assert ran == []
    (failed,) = [e for e in entries if e.phase is Phase.FAILED]
    assert failed.payload["not_run"] is True and "no consumed approval" in failed.payload["error"]


@pytest.mark.case("F-06")
async def test_callable_policy_with_pre_approval_guardrails(desk):
    """A policy callable that needs no approval for small amounts: the pre-approval pass asks it,
    the INTENT is written once, before the body."""
    ran: list[int] = []

    async def big(ctx, params, call_id) -> bool:
        return params.get("amount", 0) > 100

    refund = protect_tool(refund_tool(ran, needs_approval=big), reversibility="no_undo")
    model = scripted([("refund", {"order": "o1", "amount": 5}, "r1")], "done")
    result = await run(desk.fresh(), agent(model, refund), run_config=PRE_APPROVAL)
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED and ran == [5]
    assert phases(entries) == ["INTENT", "EXECUTED"]


# --- output guardrails and on_tool_start ---------------------------------------------------------

@tool_output_guardrail
def redact(data) -> ToolGuardrailFunctionOutput:
    return ToolGuardrailFunctionOutput.reject_content("[redacted]")


@tool_output_guardrail
def explode(data) -> ToolGuardrailFunctionOutput:
    return ToolGuardrailFunctionOutput.raise_exception(output_info="output looked wrong")


def booking(undone: list[Any], **tool_kw: Any):
    @function_tool(**tool_kw)
    def book(room: str) -> str:
        return f"booking-{room}"

    return protect_tool(book, reversibility="compensatable", undo=lambda ctx: undone.append(ctx.result))


@function_tool
@read_only
def crash() -> str:
    raise RuntimeError("later step failed")


async def test_output_guardrail_replacing_result_journals_the_real_output(desk):
    """The app's output guardrail replaces the result: the model gets the replacement, the
    journal and the undo's ctx.result the tool's real output."""
    undone: list[Any] = []
    model = scripted([("book", {"room": "12"}, "b1")], [("crash", {}, "c1")], "x")
    result = await run(desk.fresh(), agent(model, booking(undone, tool_output_guardrails=[redact]), crash))
    entries = await desk.entries(result.saga_id)
    executed = next(e for e in entries if e.tool == "book" and e.phase is Phase.EXECUTED)
    assert executed.payload["result"] == "booking-12"
    assert "[redacted]" in str(model.calls[1].input)
    assert result.status is SagaStatus.COMPENSATED
    assert undone == ["booking-12"]


async def test_output_guardrail_raising_after_the_body_is_undone(desk):
    """The app's output guardrail raises after the body ran: EXECUTED journaled, undone,
    COMPENSATED; nothing in doubt."""
    undone: list[Any] = []
    model = scripted([("book", {"room": "7"}, "b1")], "x")
    result = await run(desk.fresh(), agent(model, booking(undone, tool_output_guardrails=[explode])))
    entries = await desk.entries(result.saga_id)
    assert phases(entries, tool="book") == ["INTENT", "EXECUTED"]
    assert result.status is SagaStatus.COMPENSATED
    assert undone == ["booking-7"] and in_doubt(entries) == []


async def test_app_on_tool_start_raising_leaves_nothing_in_doubt(desk):
    """The app's on_tool_start raises: the body never runs; the protected call's INTENT gets a
    FAILED (not run) outcome and the saga is compensated at once."""

    class Boom(Exception):
        pass

    class AppHooks(RunHooks[Any]):
        async def on_tool_start(self, context, agent, tool) -> None:
            raise Boom("audit log down")

    undone: list[Any] = []
    model = scripted([("book", {"room": "3"}, "b1")], "x")
    result = await run(desk.fresh(), agent(model, booking(undone)), hooks=AppHooks())
    entries = await desk.entries(result.saga_id)
    assert phases(entries, tool="book") == ["INTENT", "FAILED"]
    failed = next(e for e in entries if e.phase is Phase.FAILED)
    assert failed.payload["not_run"] is True and "audit log down" in failed.payload["error"]
    assert in_doubt(entries) == [] and undone == []
    assert result.status is SagaStatus.COMPENSATED


async def test_decorated_tool_rejected_by_input_guardrail_is_refused(desk):
    """A decorated tool rejected by the app's input guardrail: REFUSED with the guardrail's
    message, the body not run, the saga COMPLETED."""
    ran: list[int] = []

    @function_tool(tool_input_guardrails=[no_big_refunds])
    @compensable(undo=lambda ctx: None)
    def refund(order: str, amount: int) -> str:
        ran.append(amount)
        return "refunded"

    model = scripted([("refund", {"order": "o2", "amount": 900}, "r9")], "ok")
    result = await run(desk.fresh(), agent(model, refund))
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED and ran == []
    (refused,) = [e for e in entries if e.tool == "refund"]
    assert refused.phase is Phase.REFUSED and refused.call_id == "r9"
    assert refused.payload["result"] == "refunds of 500 or more need a manager"


async def test_decorated_tool_rejected_before_approval_is_refused(desk):
    """With pre-approval guardrails, a decorated irreversible tool rejected before any approval:
    REFUSED, no request, COMPLETED."""

    @function_tool(needs_approval=True, tool_input_guardrails=[no_big_refunds])
    @irreversible
    def refund(order: str, amount: int) -> str:
        raise AssertionError("must not run")

    model = scripted([("refund", {"order": "o2", "amount": 900}, "r9")], "ok")
    result = await run(desk.fresh(), agent(model, refund), run_config=PRE_APPROVAL)
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED, result
    assert [e.phase for e in entries if e.tool == "refund"] == [Phase.REFUSED]


# --- item 2: nested runs keep their place --------------------------------------------------------

def leaf_tools(log: list[str]):
    @function_tool
    @compensable(undo=lambda ctx: log.append(f"undo {ctx.args['what']}"))
    def reserve(what: str) -> str:
        log.append(what)
        return f"reserved {what}"

    return reserve


def parents(entries: list[Any]) -> dict[str, Any]:
    return {e.call_id: e.payload.get("parent_call_id") for e in entries if e.phase is Phase.INTENT}


async def test_nested_plain_runner_run_inside_a_decorated_tool(desk):
    """Way 1: a plain Runner.run inside a decorated tool body: inner calls carry the call id."""
    log: list[str] = []
    inner = Agent(name="inner", model=scripted([("reserve", {"what": "car"}, "in-1")], "ok"),
                  tools=[leaf_tools(log)])

    @function_tool
    @read_only
    async def plan(trip: str) -> str:
        return str((await Runner.run(inner, trip)).final_output)

    model = scripted([("plan", {"trip": "lisbon"}, "out-1")], "done")
    result = await run(desk.fresh(), agent(model, plan, name="outer"))
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED
    assert parents(entries) == {"out-1": None, "in-1": "out-1"}


@pytest.mark.parametrize("wrap", ["nested_agent_tool", "protect_tool"])
async def test_nested_as_tool_records_parent_and_outcome(desk, wrap):
    """Way 2: agent.as_tool wrapped with nested_agent_tool or protect_tool: inner calls carry
    the parent; the outer call's outcome is journaled by our output guardrail."""
    log: list[str] = []
    inner = Agent(name="inner", model=scripted([("reserve", {"what": "car"}, "in-1")], "ok"),
                  tools=[leaf_tools(log)])
    as_tool = inner.as_tool(tool_name="helper", tool_description="helps")
    tool = (nested_agent_tool(as_tool) if wrap == "nested_agent_tool"
            else protect_tool(as_tool, reversibility="read_only"))
    model = scripted([("helper", {"input": "car"}, "out-1")], "done")
    result = await run(desk.fresh(), agent(model, tool, name="outer"))
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED
    assert parents(entries) == {"out-1": None, "in-1": "out-1"}
    assert phases(entries) == ["INTENT", "INTENT", "EXECUTED", "EXECUTED"]


async def test_nested_agent_tool_two_levels_failure_undoes_the_innermost(desk):
    """Way 3: nested_agent_tool at two levels; a failure after them undoes the innermost effect,
    and every level names its parent."""
    log: list[str] = []
    inner = Agent(name="inner", model=scripted([("reserve", {"what": "car"}, "i-1")], "ok"),
                  tools=[leaf_tools(log)])
    middle = Agent(name="middle", model=scripted([("inner", {"input": "car"}, "m-1")], "ok"),
                   tools=[nested_agent_tool(inner.as_tool(tool_name="inner", tool_description="i"))])
    outer_model = scripted([("middle", {"input": "car"}, "o-1")], [("crash", {}, "o-2")], "x")
    outer = agent(outer_model, nested_agent_tool(middle.as_tool(tool_name="middle", tool_description="m")),
                  crash, name="outer")
    result = await run(desk.fresh(), outer)
    entries = await desk.entries(result.saga_id)
    assert parents(entries) == {"o-1": None, "m-1": "o-1", "i-1": "m-1", "o-2": None}
    assert result.status is SagaStatus.COMPENSATED
    assert log == ["car", "undo car"] and in_doubt(entries) == []


# --- F-10: two-level nested_agent_tool paused, restored in a fresh process ----------------------

@pytest.mark.case("F-10")
async def test_two_level_nested_pause_restored_in_fresh_process(desk):
    """F-10: paused in the innermost agent, restored with a fresh Sagacity and fresh agents on the
    same journal, approved and resumed: COMPLETED, the wire run once, both nested calls'
    outcomes journaled, the wire naming its parent (today IN_DOUBT)."""
    ran: list[int] = []
    paused = await run(desk.fresh(), f10_agents(ran, first=True))
    assert paused.status is SagaStatus.AWAITING_APPROVAL and ran == []
    (request,) = paused.approvals
    s = desk.fresh()
    await s.approve(request.request_id, approver="ana")
    result = await asyncio.wait_for(s.resume(paused.saga_id, f10_agents(ran, first=False)), GUARD)
    entries = await desk.entries(paused.saga_id)
    assert result.status is SagaStatus.COMPLETED, result
    assert result.final_output == "outer done" and ran == [7]
    calls = [(e.phase.value, e.call_id) for e in entries
             if e.phase in (Phase.INTENT, Phase.EXECUTED, Phase.FAILED, Phase.REFUSED)]
    assert calls == [("INTENT", "m1"), ("INTENT", "i1"), ("INTENT", "w1"),
                     ("EXECUTED", "w1"), ("EXECUTED", "i1"), ("EXECUTED", "m1")]
    assert parents(entries) == {"m1": None, "i1": "m1", "w1": "i1"}
    middle_out = next(e for e in entries if e.phase is Phase.EXECUTED and e.call_id == "m1")
    assert middle_out.payload["result"] == "middle done"
    assert in_doubt(entries) == []


@pytest.mark.case("F-10")
async def test_rejected_in_fresh_process_completes_without_running(desk):
    """F-10, rejected: the wire never runs, the nested calls still get their outcome."""
    ran: list[int] = []
    paused = await run(desk.fresh(), f10_agents(ran, first=True))
    (request,) = paused.approvals
    s = desk.fresh()
    await s.reject(request.request_id, approver="ana", reason="too much")
    result = await asyncio.wait_for(s.resume(paused.saga_id, f10_agents(ran, first=False)), GUARD)
    entries = await desk.entries(paused.saga_id)
    assert result.status is SagaStatus.COMPLETED and ran == []
    assert in_doubt(entries) == []


def test_journal_show_indents_nested_calls(tmp_path):
    """`sagacity journal show` shows the nesting: each nested call, and its outcome, indented
    under its parent call."""
    from click.testing import CliRunner

    from sagacity_agents.cli import cli

    db = tmp_path / "j.db"
    log: list[str] = []
    inner = Agent(name="inner", model=scripted([("reserve", {"what": "car"}, "i-1")], "ok"),
                  tools=[leaf_tools(log)])
    middle = Agent(name="middle", model=scripted([("inner", {"input": "car"}, "m-1")], "ok"),
                   tools=[nested_agent_tool(inner.as_tool(tool_name="inner", tool_description="i"))])
    outer = agent(scripted([("middle", {"input": "car"}, "o-1")], "done"),
                  nested_agent_tool(middle.as_tool(tool_name="middle", tool_description="m")),
                  name="outer")

    async def main() -> Any:
        s = Sagacity(db)
        try:
            return await run(s, outer)
        finally:
            await s.aclose()

    result = asyncio.run(main())
    shown = CliRunner().invoke(cli, ["journal", "show", result.saga_id, "--db", str(db)],
                               env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    rows = {line.split("│")[3].rstrip() for line in shown.output.splitlines()
            if line.count("│") > 4 and ("INTENT" in line or "EXECUTED" in line)}
    assert rows == {" middle", "   └ inner", "     └ reserve"}


# --- the paths docs/architecture.md lists as staying in doubt: reported at once, never waited for

async def test_protected_body_raising_without_formatter_is_in_doubt_at_once(desk):
    """failure_error_function=None: the exception leaves the run through no seam of ours; the
    INTENT is reported in doubt, at once (no in-flight wait)."""

    @function_tool(failure_error_function=None)
    def flaky(x: int) -> str:
        raise ValueError("flaky broke")

    model = scripted([("flaky", {"x": 1}, "f1")], "x")
    result = await run(desk.fresh(), agent(model, protect_tool(flaky, reversibility="no_undo")))
    entries = await desk.entries(result.saga_id)
    assert phases(entries) == ["INTENT"]
    assert result.status is SagaStatus.IN_DOUBT
    assert [i.call_id for i in result.report.in_doubt] == ["f1"]


async def test_protected_body_cancelled_by_the_sdk_is_in_doubt_at_once(desk):
    """A sibling fails with failure_error_function=None: the SDK cancels the protected body and
    calls no formatter for it; its INTENT is reported in doubt, at once."""
    cancelled: list[str] = []

    @function_tool
    async def slow(x: int) -> str:
        try:
            await asyncio.sleep(HOUR)
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        return "late"

    @function_tool(failure_error_function=None)
    @read_only
    async def boom() -> str:
        await asyncio.sleep(0.01)
        raise RuntimeError("boom")

    model = scripted([("slow", {"x": 1}, "s1"), ("boom", {}, "b1")], "x")
    tools = (protect_tool(slow, reversibility="no_undo"), boom)
    result = await run(desk.fresh(), agent(model, *tools))
    entries = await desk.entries(result.saga_id)
    assert cancelled == ["slow"]
    assert phases(entries, tool="slow") == ["INTENT"]
    assert result.status is SagaStatus.IN_DOUBT


async def test_agent_hooks_on_tool_start_raising_is_in_doubt_at_once(desk):
    """Agent-level hooks run beside ours: when their on_tool_start raises, the body does not run
    but no seam of ours can tell; the INTENT is reported in doubt, at once (documented)."""
    from agents import AgentHooks

    class AuditHooks(AgentHooks[Any]):
        async def on_tool_start(self, context, agent, tool) -> None:
            raise RuntimeError("audit down")

    undone: list[Any] = []
    ag = agent(scripted([("book", {"room": "1"}, "b1")], "x"), booking(undone))
    ag.hooks = AuditHooks()
    result = await run(desk.fresh(), ag)
    entries = await desk.entries(result.saga_id)
    assert phases(entries, tool="book") == ["INTENT"]
    assert result.status is SagaStatus.IN_DOUBT and undone == []


@pytest.mark.parametrize("custom_message", [False, True])
async def test_protected_tool_timeout_is_failed_not_executed(desk, custom_message):
    """The SDK cancels a protected body at its timeout and turns it into a message (its default
    one, or the tool's timeout_error_function): the call is journaled FAILED (timed out), never
    EXECUTED with the message, and the saga compensates (nothing was undone: nothing executed)."""
    kw: dict[str, Any] = {"timeout": 0.05}
    if custom_message:
        kw["timeout_error_function"] = lambda ctx, err: "the booking system is slow"

    @function_tool(**kw)
    async def book(room: str) -> str:
        await asyncio.sleep(HOUR)
        return "never"

    undone: list[Any] = []
    tool = protect_tool(book, reversibility="compensatable", undo=lambda ctx: undone.append(1))
    model = scripted([("book", {"room": "1"}, "b1")], "x")
    result = await run(desk.fresh(), agent(model, tool))
    entries = await desk.entries(result.saga_id)
    assert phases(entries) == ["INTENT", "FAILED"]
    failed = entries[[e.phase for e in entries].index(Phase.FAILED)]
    assert failed.payload["error_type"] == "ToolTimeoutError"
    assert "timed out after 0.05 seconds" in failed.payload["error"]
    assert result.status is SagaStatus.COMPENSATED and undone == []


async def test_protected_tool_timeout_raising_is_in_doubt_at_once(desk):
    """timeout_behavior="raise_exception": ToolTimeoutError leaves the run through no seam of
    ours; the cancelled body's INTENT is reported in doubt, at once (documented)."""

    @function_tool(timeout=0.05, timeout_behavior="raise_exception")
    async def book(room: str) -> str:
        await asyncio.sleep(HOUR)
        return "never"

    model = scripted([("book", {"room": "1"}, "b1")], "x")
    result = await run(desk.fresh(), agent(model, protect_tool(book, reversibility="no_undo")))
    entries = await desk.entries(result.saga_id)
    assert phases(entries) == ["INTENT"] and result.status is SagaStatus.IN_DOUBT


async def test_streamed_run_protected_paths(desk):
    """The same seams on a streamed run: a rejected refund is REFUSED with no INTENT, an allowed
    booking whose output the app redacts is journaled with its real result; COMPLETED."""
    ran: list[int] = []
    undone: list[Any] = []
    refund = protect_tool(refund_tool(ran, tool_input_guardrails=[no_big_refunds]),
                          reversibility="no_undo")
    model = scripted([("refund", {"order": "o1", "amount": 900}, "r1"),
                      ("book", {"room": "5"}, "b1")], "done")
    ag = agent(model, refund, booking(undone, tool_output_guardrails=[redact]))
    async with desk.fresh().run_streamed(ag, "go") as stream:
        async for _ in stream.stream_events():
            pass
    result = stream.result
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED and ran == []
    assert [(e.phase.value, e.tool) for e in entries if e.tool] == [
        ("INTENT", "book"), ("EXECUTED", "book"), ("REFUSED", "refund")]
    assert next(e for e in entries if e.phase is Phase.EXECUTED).payload["result"] == "booking-5"


@pytest.mark.case("F-10")
async def test_nested_pause_decided_by_an_inline_approver_in_the_same_process(desk):
    """F-10 decided inline (Sagacity.run(approver=...)): the same saga object resumes; both nested
    calls get one outcome each, COMPLETED."""
    from sagacity_agents.sdk.results import Decision

    ran: list[int] = []

    async def approve(request) -> Decision:
        return Decision(True, "ana")

    result = await run(desk.fresh(), f10_agents(ran, first=True), approver=approve)
    entries = await desk.entries(result.saga_id)
    assert result.status is SagaStatus.COMPLETED and ran == [7]
    assert phases(entries) == ["INTENT", "INTENT", "INTENT", "EXECUTED", "EXECUTED", "EXECUTED"]
    assert parents(entries) == {"m1": None, "i1": "m1", "w1": "i1"}


@pytest.mark.case("F-10")
def test_nested_pause_approved_and_resumed_in_separate_processes(tmp_path):
    """F-10 across real processes on one SQLite file: one process pauses, another approves and
    resumes: COMPLETED, the wire run once, every nested call's outcome journaled."""
    import json
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    db = str(tmp_path / "f10.db")

    def play(*args: str) -> dict[str, Any]:
        done = subprocess.run(python_command("-m", "tests.sdk.nested_app", db, *args), cwd=root,
                              capture_output=True, text=True, timeout=GUARD)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    paused = play("pause")
    assert paused["status"] == "AWAITING_APPROVAL" and paused["ran"] == []
    resumed = play("resume", paused["saga_id"])
    assert resumed == {"saga_id": paused["saga_id"], "status": "COMPLETED", "ran": [7],
                       "final_output": "outer done"}

    async def read() -> list[Any]:
        journal = SqliteJournal(db)
        try:
            return await journal.entries(paused["saga_id"])
        finally:
            await journal.close()

    entries = asyncio.run(read())
    assert phases(entries) == ["INTENT", "INTENT", "INTENT", "EXECUTED", "EXECUTED", "EXECUTED"]
    assert parents(entries) == {"m1": None, "i1": "m1", "w1": "i1"} and in_doubt(entries) == []

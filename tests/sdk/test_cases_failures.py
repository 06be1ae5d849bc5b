"""Cases C-01, C-02, C-03, C-04 (../shared/cases/cases-1.md): failures the SDK hides or races."""

from __future__ import annotations

import asyncio
import time

import pytest
from agents import Agent, function_tool

from sagacity_agents import FailurePolicy, Sagacity, SagaStatus, compensable, no_undo, read_only
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.evidence import verify_journal

from .helpers import agent, phases, scripted, tool_outputs


class SeatTaken(Exception):
    pass


def build_c01(refunds: list[str], *, fatal: bool, sync_notify: bool = False):
    def refund(ctx):
        refunds.append(ctx.args["order"])

    @function_tool
    @compensable(undo=refund)
    async def charge(order: str) -> str:
        return f"charged {order}"

    def seat_taken(seat: str) -> str:
        raise SeatTaken(f"seat {seat} is taken")

    @function_tool(failure_error_function=None) if fatal else function_tool
    @no_undo
    async def reserve(seat: str) -> str:
        await asyncio.sleep(0.01)
        return seat_taken(seat)

    if sync_notify:
        def unnotify(ctx):
            refunds.append("unnotify")

        @function_tool
        @compensable(undo=unnotify)
        def notify() -> str:
            time.sleep(1.0)
            return "notified"
    else:
        @function_tool
        @no_undo
        async def notify() -> str:
            await asyncio.sleep(5)
            return "notified"

    model = scripted(
        [("charge", {"order": "o1"}, "c1"), ("reserve", {"seat": "12A"}, "c2"), ("notify", {}, "c3")],
        "done",
    )
    return model, agent(model, charge, reserve, notify)


@pytest.mark.case("C-01")
@pytest.mark.parametrize("fatal", [True, False], ids=["failure_error_function=None", "default-formatter"])
async def test_parallel_calls_one_fails_and_the_charge_is_refunded_once(fatal):
    """C-01: charge EXECUTED, reserve FAILED(SeatTaken), notify FAILED(cancelled); refund once."""
    refunds: list[str] = []
    journal = InMemoryJournal()
    model, ag = build_c01(refunds, fatal=fatal)
    result = await Sagacity(journal).run(ag, "go")
    entries = await journal.entries(result.saga_id)

    assert result.status is SagaStatus.COMPENSATED
    assert result.exception is not None
    assert phases(entries, tool="charge") == ["INTENT", "EXECUTED"]
    assert phases(entries, tool="reserve") == ["INTENT", "FAILED"]
    reserve_failed = next(e for e in entries if e.tool == "reserve" and e.phase is Phase.FAILED)
    assert reserve_failed.payload["error_type"] == "SeatTaken"
    assert phases(entries, tool="notify") == ["INTENT", "FAILED"]
    notify_failed = next(e for e in entries if e.tool == "notify" and e.phase is Phase.FAILED)
    assert notify_failed.payload["cancelled"] is True
    assert refunds == ["o1"]
    assert [i.tool for i in result.report.undone] == ["charge"]
    assert result.report.in_doubt == ()
    assert (await verify_journal(journal, result.saga_id))[0].ok


@pytest.mark.case("C-01")
async def test_sync_sibling_runs_to_the_end_and_is_undone():
    """C-01 variant: a sync sibling the SDK cannot cancel journals its real outcome (EXECUTED),
    once, before compensation decides; it is then undone."""
    refunds: list[str] = []
    journal = InMemoryJournal()
    model, ag = build_c01(refunds, fatal=True, sync_notify=True)
    started = time.monotonic()
    result = await Sagacity(journal).run(ag, "go")
    entries = await journal.entries(result.saga_id)

    assert time.monotonic() - started >= 0.9  # compensation waited for the thread
    assert phases(entries, tool="notify") == ["INTENT", "EXECUTED"]
    executed = next(e for e in entries if e.tool == "notify" and e.phase is Phase.EXECUTED)
    compensating = [e for e in entries if e.phase is Phase.COMPENSATING]
    assert executed.seq < min(e.seq for e in compensating)
    assert sorted(refunds) == ["o1", "unnotify"]
    assert result.status is SagaStatus.COMPENSATED
    assert (await verify_journal(journal, result.saga_id))[0].ok


@pytest.mark.case("C-02")
@pytest.mark.parametrize("behavior", ["error_as_result", "raise_exception"])
async def test_tool_timeout_is_one_failed_entry_and_no_executed(behavior):
    """C-02: exactly one FAILED entry saying it timed out; no EXECUTED afterwards."""
    journal = InMemoryJournal()
    finally_ran = asyncio.Event()

    @function_tool(timeout=0.05, timeout_behavior=behavior)
    @no_undo
    async def slow() -> str:
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.01)
            finally_ran.set()
        return "never"

    model = scripted([("slow", {}, "t1")], "done")
    result = await Sagacity(journal).run(agent(model, slow), "go")
    await asyncio.sleep(0.1)
    entries = await journal.entries(result.saga_id)
    assert phases(entries, tool="slow") == ["INTENT", "FAILED"]
    failed = next(e for e in entries if e.phase is Phase.FAILED)
    assert failed.payload["timed_out"] is True and failed.payload["cancelled"] is True
    assert "timed out after 0.05 s" in failed.payload["error"]
    assert finally_ran.is_set()
    assert result.status is not SagaStatus.COMPLETED
    assert result.status is SagaStatus.COMPENSATED


def _c03_setup(journal):
    @function_tool
    @read_only
    def boom(x: int) -> str:
        raise ValueError("bad")

    inner_model = scripted([("boom", {"x": 2}, "inner-1")], "inner done")
    inner = Agent(name="inner", model=inner_model, tools=[boom])
    from sagacity_agents import nested_agent_tool

    inner_tool = nested_agent_tool(inner.as_tool(tool_name="inner", tool_description="inner agent"))
    outer_model = scripted(
        [("boom", {"x": 1}, "outer-1")], [("inner", {"input": "go"}, "outer-2")], "outer done"
    )
    return outer_model, agent(outer_model, boom, inner_tool, name="outer")


@pytest.mark.case("C-03")
async def test_failure_inside_agent_used_as_tool_continue_policy():
    """C-03: both calls INTENT->FAILED(ValueError) in one saga, the inner one naming its outer
    call; the model still gets the SDK's error text; the saga fails and compensates."""
    journal = InMemoryJournal()
    model, ag = _c03_setup(journal)
    result = await Sagacity(journal, policy=FailurePolicy.CONTINUE).run(ag, "go")
    entries = await journal.entries(result.saga_id)
    boom = [e for e in entries if e.tool == "boom"]
    assert [e.phase.value for e in boom] == ["INTENT", "FAILED", "INTENT", "FAILED"]
    assert all(e.payload["error_type"] == "ValueError" for e in boom if e.phase is Phase.FAILED)
    assert "parent_call_id" not in boom[0].payload
    assert boom[2].payload["parent_call_id"] == "outer-2"
    assert any("An error occurred while running the tool" in o for o in tool_outputs(model))
    assert result.status is SagaStatus.COMPENSATED
    assert result.final_output is None or result.exception is None


@pytest.mark.case("C-03")
async def test_default_policy_stops_before_second_call():
    """C-03 under the default policy: the run stops after the first failure."""
    journal = InMemoryJournal()
    model, ag = _c03_setup(journal)
    result = await Sagacity(journal).run(ag, "go")
    entries = await journal.entries(result.saga_id)
    assert [e.call_id for e in entries if e.phase is Phase.INTENT] == ["outer-1"]
    assert result.status is SagaStatus.COMPENSATED


@pytest.mark.case("C-04")
async def test_streamed_run_hits_turn_limit():
    """C-04: create_ticket EXECUTED even if no event was read; MaxTurnsExceeded fails the saga;
    the undo runs once; never reported completed."""
    journal = InMemoryJournal()
    undone: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: undone.append(ctx.args["title"]))
    async def create_ticket(title: str) -> str:
        return "T-1"

    model = scripted([("create_ticket", {"title": "x"}, "k1")], "done")
    sagacity = Sagacity(journal)
    async with sagacity.run_streamed(agent(model, create_ticket), "go", max_turns=1) as stream:
        pass  # the consumer reads nothing
    result = stream.result
    entries = await journal.entries(result.saga_id)
    assert phases(entries, tool="create_ticket") == ["INTENT", "EXECUTED"]
    assert undone == ["x"]
    assert result.status is SagaStatus.COMPENSATED
    assert result.final_output is None and result.exception is not None


@pytest.mark.case("C-04")
async def test_streamed_run_consumed_reports_max_turns():
    journal = InMemoryJournal()

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def create_ticket(title: str) -> str:
        return "T-1"

    from agents import MaxTurnsExceeded

    model = scripted([("create_ticket", {"title": "x"}, "k1")], "done")
    async with Sagacity(journal).run_streamed(agent(model, create_ticket), "go", max_turns=1) as s:
        async for _ in s.stream_events():
            pass
    assert isinstance(s.result.exception, MaxTurnsExceeded)
    assert s.result.status is SagaStatus.COMPENSATED

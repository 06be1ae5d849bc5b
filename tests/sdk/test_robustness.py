"""Regressions from trying to break the saga layer: cancellation during compensation, failed
sagas reused, broken classifiers, values that crash conversion, journal faults, odd arguments."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
import time

import pytest
from agents import function_tool

from sagacity_agents import (
    FailurePolicy,
    Sagacity,
    SagaStatus,
    compensable,
    no_undo,
    record_undo_data,
)
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.errors import SagaStateError
from sagacity_agents.testing import make_failing

from .helpers import agent, phases, scripted


def booking_tools(world: list[int], *, started: dict[str, asyncio.Event] | None = None,
                  hang: asyncio.Event | None = None):
    """``book`` (compensatable), ``slow`` and ``boom``. ``started["undo"]`` / ``started["slow"]``
    are set when an undo / ``slow`` starts; an undo waits for ``hang`` to be set first."""
    started = started or {}

    async def cancel(ctx):
        if "undo" in started:
            started["undo"].set()
        if hang is not None:
            await hang.wait()
        world.remove(ctx.args["n"])

    @function_tool
    @compensable(undo=cancel)
    async def book(n: int) -> str:
        world.append(n)
        return f"booked {n}"

    @function_tool
    @no_undo
    async def slow() -> str:
        if "slow" in started:
            started["slow"].set()
        await asyncio.sleep(10)
        return "never"

    @function_tool
    @no_undo
    async def boom() -> str:
        raise RuntimeError("boom")

    return book, slow, boom


@pytest.mark.case("R-02")
async def test_a_second_cancellation_stops_compensation_at_the_next_step():
    """A cancelled run is compensated; a caller cancelled *again* while that runs (anyio /
    Starlette cancel scopes cancel every await, asyncio.wait_for gives up) stops compensation at
    the next step boundary (issue 18, R-02): the undo running is journaled in doubt (cancelled),
    the next undo does not start, the run ends (RUN_ENDED, the lease released), and recover
    finishes both."""
    journal = InMemoryJournal()
    world: list[int] = []
    running, undoing, hang = asyncio.Event(), asyncio.Event(), asyncio.Event()
    book, slow, _ = booking_tools(world, started={"slow": running, "undo": undoing}, hang=hang)
    model = scripted([("book", {"n": 1}, "1")], [("book", {"n": 2}, "2")], [("slow", {}, "3")], "x")
    sagacity = Sagacity(journal)
    task = asyncio.create_task(sagacity.run(agent(model, book, slow), "go"))
    await asyncio.wait_for(running.wait(), 60)
    task.cancel()  # the run is cancelled: compensation starts
    await asyncio.wait_for(undoing.wait(), 60)
    task.cancel()  # cancelled again while the first undo runs: compensation stops there
    with pytest.raises(asyncio.CancelledError):
        await task
    (sid,) = await journal.saga_ids()
    entries = await journal.entries(sid)
    assert entries[-1].phase is Phase.RUN_ENDED
    assert [e.payload["target_seq"] for e in entries if e.phase is Phase.COMPENSATING] == [
        next(e.seq for e in entries if e.phase is Phase.EXECUTED and e.call_id == "2")]
    (mark,) = [e for e in entries if e.phase is Phase.COMPENSATION_FAILED]
    assert mark.payload["cancelled"] is True and mark.payload["in_doubt"] is True
    assert world == [1, 2]
    hang.set()  # the undos are quick from now on
    recovered = await sagacity.recover(sid, agent(scripted(), book, slow))
    assert recovered.status is SagaStatus.COMPENSATED and world == []


async def test_a_failed_saga_takes_no_more_runs_and_cannot_be_closed_completed():
    journal = InMemoryJournal()
    world: list[int] = []
    book, _, boom = booking_tools(world)
    sagacity = Sagacity(journal)
    # A process died while compensating: SAGA_FAILED, no SAGA_CLOSED.
    first = await sagacity.run(agent(scripted([("book", {"n": 1}, "1")], "ok"), book), "a", close=False)
    await journal.append(first.saga_id, Phase.SAGA_FAILED, write_key="saga:failed", payload={"reason": "crash"})
    with pytest.raises(SagaStateError, match="recover"):
        await sagacity.run(agent(scripted([("book", {"n": 2}, "2")], "ok"), book), "b", saga_id=first.saga_id)
    with pytest.raises(SagaStateError, match="recover"):
        await sagacity.close_saga(first.saga_id)
    recovered = await sagacity.recover(first.saga_id, agent(scripted(), book))
    assert recovered.status is SagaStatus.COMPENSATED and world == []


async def test_a_classifier_that_raises_keeps_the_effect_undoable():
    journal = InMemoryJournal()
    world: list[int] = []

    @function_tool
    @compensable(undo=lambda ctx: world.remove(ctx.args["n"]), classify=lambda r: 1 / 0)
    async def book(n: int) -> str:
        world.append(n)
        return "booked"

    result = await Sagacity(journal).run(agent(scripted([("book", {"n": 1}, "1")], "x"), book), "go")
    executed = [e for e in await journal.entries(result.saga_id) if e.phase is Phase.EXECUTED]
    assert "ZeroDivisionError" in executed[0].payload["classifier_error"]
    assert result.status is SagaStatus.COMPENSATED and world == []


@dataclasses.dataclass
class Holder:
    lock: threading.Lock


@pytest.mark.parametrize("make", [lambda: Holder(threading.Lock()), lambda: (lambda d: (d.update(me=d), d)[1])({}),
                                  lambda: "\ud800"], ids=["lock", "self-reference", "lone-surrogate"])
async def test_results_that_break_conversion_are_marked_not_lost(make):
    journal = InMemoryJournal()
    world: list[int] = []

    @function_tool
    @compensable(undo=lambda ctx: world.remove(1))
    async def weird() -> str:
        world.append(1)
        return make()

    @function_tool
    @no_undo
    async def boom() -> str:
        raise RuntimeError("boom")

    started = time.monotonic()
    result = await Sagacity(journal).run(
        agent(scripted([("weird", {}, "1")], [("boom", {}, "2")], "x"), weird, boom), "go"
    )
    # No wait for a call that looked in flight: that wait is the 30 s in_flight_timeout, and half
    # of it is a bound no loaded machine reaches.
    assert time.monotonic() - started < 15
    executed = [e for e in await journal.entries(result.saga_id) if e.phase is Phase.EXECUTED]
    assert "$encoding_error" in executed[0].payload["result"]
    assert result.status is SagaStatus.COMPENSATED and world == []


@pytest.mark.parametrize("phase", [Phase.SAGA_FAILED, Phase.COMPENSATING])
async def test_one_failed_bookkeeping_write_does_not_stop_compensation(phase):
    world: list[int] = []
    book, _, boom = booking_tools(world)
    # A COMPENSATING write is retried once (same key and claimant nonce): two failures in a row
    # lose it.
    journal = make_failing(InMemoryJournal(), phase=phase, times=2 if phase is Phase.COMPENSATING else 1)
    model = scripted([("book", {"n": 1}, "1")], [("book", {"n": 2}, "2")], [("boom", {}, "3")], "x")
    result = await Sagacity(journal).run(agent(model, book, boom), "go")
    if phase is Phase.SAGA_FAILED:
        assert world == [] and result.status is SagaStatus.IN_DOUBT  # undone; journal incomplete
    else:
        assert world == [2]  # the newest undo lost its COMPENSATING entry: not run...
        assert result.status is SagaStatus.COMPENSATION_FAILED  # ...and is reported
        assert "COMPENSATING could not be journaled" in result.report.failed[0].detail


async def test_one_failed_compensating_write_is_retried_with_the_same_claim():
    world: list[int] = []
    book, _, boom = booking_tools(world)
    journal = make_failing(InMemoryJournal(), phase=Phase.COMPENSATING, times=1)
    model = scripted([("book", {"n": 1}, "1")], [("book", {"n": 2}, "2")], [("boom", {}, "3")], "x")
    result = await Sagacity(journal).run(agent(model, book, boom), "go")
    assert world == [] and result.status is SagaStatus.COMPENSATED


async def test_a_failed_close_write_keeps_the_result():
    world: list[int] = []
    book, _, _ = booking_tools(world)
    journal = make_failing(InMemoryJournal(), phase=Phase.SAGA_CLOSED, times=5)
    result = await Sagacity(journal).run(agent(scripted([("book", {"n": 1}, "1")], "done"), book), "go")
    assert result.final_output == "done" and result.status is SagaStatus.COMPLETED


async def test_naive_datetime_argument_is_journaled_as_given():
    journal = InMemoryJournal()

    @function_tool
    @no_undo
    def schedule(at: dt.datetime) -> str:
        return at.isoformat()

    model = scripted([("schedule", {"at": "2025-06-12T10:00:00"}, "1")], "x")
    result = await Sagacity(journal).run(agent(model, schedule), "go")
    intent = next(e for e in await journal.entries(result.saga_id) if e.phase is Phase.INTENT)
    assert intent.payload["args"] == {"at": "2025-06-12T10:00:00.000000"}
    assert result.status is SagaStatus.COMPLETED


@pytest.mark.case("R-03")
async def test_unencodable_undo_data_does_not_raise_in_the_body():
    """R-03: ``record_undo_data`` with a value that has no canonical encoding does not raise into
    the body (the effect has happened by then): the body returns, the call is journaled EXECUTED
    with the encoding marker (naming the path) and fails the saga."""
    journal = InMemoryJournal()
    returned: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: None)
    def book(n: int) -> str:
        record_undo_data({"id": 7, "conn": threading.Lock()})
        returned.append("booked")
        return "booked"

    result = await Sagacity(journal, policy=FailurePolicy.CONTINUE).run(
        agent(scripted([("book", {"n": 1}, "1")], "x"), book), "go"
    )
    assert returned == ["booked"]
    entries = await journal.entries(result.saga_id)
    assert phases(entries) == ["INTENT", "EXECUTED"]
    executed = next(e for e in entries if e.phase is Phase.EXECUTED)
    assert executed.payload["undo_data"]["$encoding_error"].startswith("$.conn: ")
    assert result.failures and "undo data could not be journaled" in result.failures[0].error


async def test_lost_acknowledgement_of_an_intent_still_runs_the_call_once():
    ran: list[int] = []

    @function_tool
    @no_undo
    async def pay(n: int) -> str:
        ran.append(n)
        return "paid"

    journal = make_failing(InMemoryJournal(), phase=Phase.INTENT, times=1, after_write=True)
    result = await Sagacity(journal).run(agent(scripted([("pay", {"n": 1}, "1")], "x"), pay), "go")
    assert ran == [1] and result.status is SagaStatus.COMPLETED
    assert phases(await journal.inner.entries(result.saga_id)) == ["INTENT", "EXECUTED"]


async def test_two_tools_with_one_name_on_one_agent_are_refused():
    from agents import Agent

    from sagacity_agents.errors import ConfigurationError

    @function_tool(name_override="book")
    @compensable(undo=lambda ctx: None)
    def book_flight(n: int) -> str:
        return "flight"

    @function_tool(name_override="book")
    @compensable(undo=lambda ctx: None)
    def book_hotel(n: int) -> str:
        return "hotel"

    hotels = Agent(name="hotels", model=scripted("x"), tools=[book_hotel])
    triage = Agent(name="triage", model=scripted("x"), tools=[book_flight], handoffs=[hotels])
    result = await Sagacity(InMemoryJournal()).run(triage, "go")  # one each: fine (M-03)
    assert result.status.value == "COMPLETED"
    triage.tools.append(book_hotel)  # two on one agent: refused
    with pytest.raises(ConfigurationError, match="agent 'triage' has two different tools named 'book'"):
        await Sagacity(InMemoryJournal()).run(triage, "go")


async def test_a_body_failing_after_recording_undo_data_is_undone():
    world: list[str] = []
    journal = InMemoryJournal()

    def release(ctx):
        if ctx.undo_data["id"] in world:
            world.remove(ctx.undo_data["id"])

    @function_tool
    @compensable(undo=release)
    def reserve(n: int) -> str:
        record_undo_data({"id": f"R{n}"})
        world.append(f"R{n}")
        raise ConnectionError("lost the reply after reserving")

    result = await Sagacity(journal).run(agent(scripted([("reserve", {"n": 3}, "1")], "x"), reserve), "go")
    assert world == [] and result.status is SagaStatus.COMPENSATED
    assert [i.tool for i in result.report.undone] == ["reserve"]


async def test_recover_retries_a_failed_undo_with_the_same_idempotency_key():
    world: list[int] = []
    keys: list[str] = []
    flaky = {"fail": True}

    def cancel(ctx):
        keys.append(ctx.idempotency_key)
        if flaky["fail"]:
            raise ConnectionError("refund API down")
        world.remove(ctx.args["n"])

    @function_tool
    @compensable(undo=cancel)
    def book(n: int) -> str:
        world.append(n)
        return "ok"

    _, _, boom = booking_tools([])
    sagacity = Sagacity(InMemoryJournal())
    first = await sagacity.run(agent(scripted([("book", {"n": 1}, "1")], [("boom", {}, "2")], "x"), book, boom), "go")
    assert first.status is SagaStatus.COMPENSATION_FAILED and world == [1]
    flaky["fail"] = False
    again = await sagacity.recover(first.saga_id, agent(scripted(), book, boom))
    assert again.status is SagaStatus.COMPENSATED and world == []
    assert len(set(keys)) == 1 and len(keys) == 2

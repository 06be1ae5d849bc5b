"""How a run that lost its lease *ends* (issue 18, R-01; found by a new user's review): never as
if all went well. The stall happens where no tool body is running (before a model call, after
``Runner.run`` returned), so the recovery that takes over can undo everything and close the
saga; the stalled run must still end LEASE_LOST with LeaseLostError, its output withheld, and
start no body. And an outcome that lands after a recovery closed the saga (a human answered
"not run") is still journaled, late. Same scale model as ``test_fencing.py``: the
stalled run's journal clock is an hour behind; the recovery runs in another thread.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from agents import RunHooks, Runner

from sagacity_agents import Sagacity, SagaRunHooks, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.errors import LeaseLostError
from sagacity_agents.core.chain import verify_entries

from .helpers import agent as make_agent
from .helpers import scripted
from .test_fencing import Trip, behind, place  # noqa: F401 - the fixture is used by name

pytestmark = pytest.mark.case("R-01")


def in_other_thread(work) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``work()`` (a coroutine function) on its own event loop in a thread."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = asyncio.run(work())
        except BaseException as exc:  # noqa: BLE001 - read by the test
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def journals(place):  # noqa: F811 - the fixture's value
    backend, location, options = place
    stalled = backend.journal(location, clock=behind, **options)
    shared = backend.name == "memory"
    return stalled, (lambda: stalled if shared else backend.journal(location, **options)), shared


class StallBeforeModelCall(RunHooks[Any]):
    """Blocks the event loop in the run's ``n``-th model call until ``gate`` is set."""

    def __init__(self, n: int, reached: threading.Event, gate: threading.Event) -> None:
        self.n, self.calls, self.reached, self.gate = n, 0, reached, gate

    async def on_llm_start(self, context, agent, system_prompt, input_items) -> None:
        self.calls += 1
        if self.calls == self.n:
            self.reached.set()
            assert self.gate.wait(60)  # blocks the loop: no renewal


async def test_stalled_before_a_model_call_after_a_close_ends_lease_lost(place):  # noqa: F811
    trip = Trip()
    stalled, other_journal, shared = journals(place)
    reached, gate = threading.Event(), threading.Event()

    async def recover() -> Any:
        journal = other_journal()
        try:
            assert reached.wait(60)
            return await Sagacity(journal).recover("trip-x", trip.agent())
        finally:
            if not shared:
                await journal.close()
            gate.set()

    thread, out = in_other_thread(recover)
    try:
        result = await Sagacity(stalled).run(trip.agent(), "go", saga_id="trip-x",
                                             hooks=StallBeforeModelCall(2, reached, gate))
    finally:
        gate.set()
        thread.join(60)
    assert out["result"].status is SagaStatus.COMPENSATED  # the flight undone, the saga closed
    assert result.status is SagaStatus.LEASE_LOST
    assert isinstance(result.exception, LeaseLostError) and result.final_output is None
    assert result.withheld_reason and "lost the saga's lease" in result.withheld_reason
    assert trip.log == ["flight", "undo flight"]  # the hotel's body never started
    entries = await stalled.entries("trip-x")
    assert entries[-1].phase is Phase.SAGA_CLOSED and verify_entries("trip-x", entries).ok
    await stalled.close()


async def test_hooks_block_left_after_a_takeover_raises(place):  # noqa: F811
    """``Runner.run`` returned "done"; while the application still held the block, a recovery
    took the saga over, undid the calls and closed it: leaving the block raises."""
    trip = Trip()
    stalled, other_journal, shared = journals(place)
    agent = make_agent(scripted([("book_flight", {"to": "LIS"}, "f1")], "done"), *trip.tools)

    async def recover() -> Any:
        journal = other_journal()
        try:
            return await Sagacity(journal).recover("trip-h", trip.agent())
        finally:
            if not shared:
                await journal.close()

    with pytest.raises(LeaseLostError) as lost:
        async with SagaRunHooks(stalled, agent=agent, saga_id="trip-h") as hooks:
            result = await Runner.run(agent, "go", hooks=hooks)
            assert result.final_output == "done"
            thread, out = in_other_thread(recover)
            thread.join(60)  # the loop is blocked meanwhile (a stall of the application)
    assert out["result"].status is SagaStatus.COMPENSATED
    assert hooks.status is SagaStatus.LEASE_LOST and "lost its lease" in str(lost.value)
    assert trip.log == ["flight", "undo flight"]
    await stalled.close()


async def test_an_outcome_after_the_close_is_journaled_late_not_refused(place):  # noqa: F811
    """The hotel's body is stalled; a recovery reports it in doubt, a human answers "not run",
    the next recovery closes the saga; the hotel then returns: its EXECUTED is journaled late
    after the close (the one entry a closed saga accepts: it reopens it), nothing is left out
    of the journal, and the run still ends LEASE_LOST. (What recovery then does:
    ``tests/in_doubt/test_outcome_outranks_answer.py``.)"""
    trip = Trip()
    stalled, other_journal, shared = journals(place)

    async def recover_twice() -> Any:
        journal = other_journal()
        try:
            assert trip.hotel_started.wait(60)
            s = Sagacity(journal)
            first = await s.recover("trip-n", trip.agent())
            (doubt,) = first.in_doubt
            await s.resolve("trip-n", doubt.seq, ran=False, resolver="ops", reason="no booking seen",
                            force=True)
            return await s.recover("trip-n", trip.agent())
        finally:
            if not shared:
                await journal.close()
            trip.gate.set()

    thread, out = in_other_thread(recover_twice)
    try:
        result = await Sagacity(stalled).run(trip.agent(), "go", saga_id="trip-n")
    finally:
        trip.gate.set()
        thread.join(60)
    assert out["result"].status is SagaStatus.COMPENSATED
    assert result.status is SagaStatus.LEASE_LOST
    assert "NOT IN THE JOURNAL" not in str(result.exception)
    entries = await stalled.entries("trip-n")
    assert entries[-1].phase is Phase.EXECUTED and entries[-1].payload["late"] is True
    assert entries[-2].phase is Phase.SAGA_CLOSED and verify_entries("trip-n", entries).ok
    assert "charged" not in trip.log
    await stalled.close()


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5", None])
def test_lease_seconds_is_checked_when_the_facade_is_made(bad):
    """A lease that cannot work is refused at construction, before anything is written (it was
    accepted, then failed at the first run after SAGA_OPENED was journaled)."""
    from sagacity_agents.backends import InMemoryJournal
    from sagacity_agents.saga import Saga

    with pytest.raises(ValueError, match="lease_seconds"):
        Sagacity(InMemoryJournal(), lease_seconds=bad)
    with pytest.raises(ValueError, match="lease_seconds"):
        Saga(InMemoryJournal(), lease_seconds=bad)

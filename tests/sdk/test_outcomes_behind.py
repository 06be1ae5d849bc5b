"""Outcomes written behind their calls (a journal's ``writes_outcomes_behind``; PostgreSQL's
``fast_outcomes``): a successful call's result goes back to the agent without waiting for its
EXECUTED entry; the entries still land in the order the calls ended, the saga waits for them
before it decides anything (verdict, compensation, end of run), and an entry that cannot be
written leaves the call in doubt, never hidden.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase, PostgresJournal
from sagacity_agents.errors import JournalWriteError
from sagacity_agents.evidence import verify_journal
from sagacity_agents.guardrails import saga_output_guardrail
from sagacity_agents.backends.memory.journal import InMemoryJournal

from .helpers import scripted


class BehindJournal(InMemoryJournal):
    """In memory, outcomes written behind; EXECUTED appends wait for ``gate`` (or fail)."""

    writes_outcomes_behind = True

    def __init__(self, *, fail_executed: bool = False, delay: float = 0.0) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.fail_executed = fail_executed
        self.delay = delay
        self.waiting = 0

    async def append(self, request, **kwargs):  # type: ignore[no-untyped-def]
        phase = request.phase  # views hand the backend an AppendRequest
        if phase is Phase.EXECUTED:
            if self.fail_executed:
                raise JournalWriteError("journal down for outcomes")
            if self.delay:
                await asyncio.sleep(self.delay)
            else:
                self.waiting += 1
                await self.gate.wait()
        return await super().append(request, **kwargs)


def _undo(ctx: Any) -> None:
    pass


def tools(journal: BehindJournal, seen: list[str], saga_id: str) -> list[Any]:
    @function_tool
    @compensable(undo=_undo)
    async def first(item: str) -> str:
        """First step."""
        seen.append(f"first:{item}")
        return "first done"

    @function_tool
    @compensable(undo=_undo)
    async def second(item: str) -> str:
        """Second step: runs while the first call's EXECUTED is still unwritten."""
        entries = await journal.entries(saga_id)
        seen.append(f"second sees {[e.phase.value for e in entries if e.tool]}, "
                    f"{journal.waiting} waiting")
        journal.gate.set()
        return "second done"

    return [first, second]


async def test_the_result_goes_back_before_its_executed_entry_and_entries_keep_call_order():
    journal = BehindJournal()
    seen: list[str] = []
    s_id = "behind-1"
    first, second = tools(journal, seen, s_id)
    model = scripted([("first", {"item": "a"}, "c1")], [("second", {"item": "b"}, "c2")], "done")
    s = Sagacity(journal)
    result = await s.run(Agent(name="a", model=model, tools=[first, second]), "go", saga_id=s_id)
    assert result.status is SagaStatus.COMPLETED
    # The model got the first result and asked for the second call before EXECUTED was written.
    assert seen == ["first:a", "second sees ['INTENT', 'INTENT'], 1 waiting"]
    entries = await journal.entries(s_id)
    assert [(e.phase.value, e.tool) for e in entries if e.tool] == [
        ("INTENT", "first"), ("INTENT", "second"), ("EXECUTED", "first"), ("EXECUTED", "second"),
    ]
    assert entries[-1].phase is Phase.SAGA_CLOSED
    (verified,) = await verify_journal(journal, s_id)
    assert verified.ok


async def test_an_outcome_that_cannot_be_written_behind_leaves_the_call_in_doubt():
    journal = BehindJournal(fail_executed=True)

    @function_tool
    @compensable(undo=_undo)
    async def charge(amount: int) -> str:
        """Charge."""
        return f"charged {amount}"

    model = scripted([("charge", {"amount": 5}, "c1")], "done")
    result = await Sagacity(journal).run(Agent(name="a", model=model, tools=[charge]), "go")
    assert result.status is SagaStatus.IN_DOUBT
    assert [(i.tool, i.call_id) for i in result.in_doubt] == [("charge", "c1")]
    # The tool's result still reached the model: the failing write hid nothing from it.
    assert any(isinstance(i, dict) and i.get("output") == "charged 5" for i in model.calls[-1].input)


async def test_the_output_guardrail_waits_for_outcomes_written_behind():
    """The final answer comes right after the last call, while its EXECUTED is still being
    written: the verdict must wait for it, not call the saga in doubt and withhold the answer."""
    journal = BehindJournal(delay=0.05)

    @function_tool
    @compensable(undo=_undo)
    async def book(room: str) -> str:
        """Book."""
        return f"booked {room}"

    model = scripted([("book", {"room": "12"}, "c1")], "all booked")
    agent = Agent(name="a", model=model, tools=[book], output_guardrails=[saga_output_guardrail()])
    result = await Sagacity(journal).run(agent, "go")
    assert (result.status, result.output_withheld, result.final_output) == (
        SagaStatus.COMPLETED, False, "all booked")


async def test_fast_outcomes_on_postgres_write_every_outcome_behind_in_call_order(pg_uri):
    journal = PostgresJournal(pg_uri, fast_outcomes=True)
    assert journal.writes_outcomes_behind

    @function_tool
    @compensable(undo=_undo)
    async def reserve(item: str) -> str:
        """Reserve."""
        return f"reserved {item}"

    calls = [[("reserve", {"item": f"i{n}"}, f"c{n}")] for n in range(5)]
    s = Sagacity(journal)
    try:
        result = await s.run(Agent(name="a", model=scripted(*calls, "done"), tools=[reserve]), "go")
        assert result.status is SagaStatus.COMPLETED
        entries = await journal.entries(result.saga_id)
        executed = [e.call_id for e in entries if e.phase is Phase.EXECUTED]
        assert executed == [f"c{n}" for n in range(5)]
        assert [e.phase for e in entries][-2:] == [Phase.RUN_ENDED, Phase.SAGA_CLOSED]
        (verified,) = await verify_journal(journal, result.saga_id)
        assert verified.ok
    finally:
        await s.aclose()


async def test_parallel_calls_then_a_failing_one_compensate_every_executed_in_reverse_order():
    """Two calls in one turn whose EXECUTED entries are still being written behind when a later
    call fails (default STOP policy): compensation sees both EXECUTED and undoes them in reverse
    order of their INTENTs; the journal verifies."""
    journal = BehindJournal(delay=0.05)
    undone: list[str] = []

    @function_tool
    @compensable(undo=lambda ctx: undone.append(ctx.args["item"]))
    async def reserve(item: str) -> str:
        """Reserve."""
        return f"reserved {item}"

    @function_tool
    @compensable(undo=_undo)
    async def pay(amount: int) -> str:
        """Pay: fails."""
        raise ValueError("card declined")

    model = scripted([("reserve", {"item": "a"}, "c1"), ("reserve", {"item": "b"}, "c2")],
                     [("pay", {"amount": 5}, "c3")], "done")
    result = await Sagacity(journal).run(Agent(name="a", model=model, tools=[reserve, pay]), "go")
    assert result.status is SagaStatus.COMPENSATED
    entries = await journal.entries(result.saga_id)
    intents = [e.payload["args"]["item"] for e in entries
               if e.phase is Phase.INTENT and e.tool == "reserve"]
    assert sum(e.phase is Phase.EXECUTED for e in entries) == 2
    assert undone == list(reversed(intents))
    assert result.in_doubt == ()
    (verified,) = await verify_journal(journal, result.saga_id)
    assert verified.ok


async def test_streamed_run_waits_for_outcomes_written_behind_before_closing():
    """Sagacity.run_streamed with outcomes written behind: every EXECUTED lands before
    RUN_ENDED / SAGA_CLOSED, the saga completes, nothing in doubt."""
    journal = BehindJournal(delay=0.05)

    @function_tool
    @compensable(undo=_undo)
    async def book(room: str) -> str:
        """Book."""
        return f"booked {room}"

    model = scripted([("book", {"room": "1"}, "c1"), ("book", {"room": "2"}, "c2")], "done")
    async with Sagacity(journal).run_streamed(Agent(name="a", model=model, tools=[book]), "go") as s:
        async for _ in s.stream_events():
            pass
    assert s.result.status is SagaStatus.COMPLETED
    entries = await journal.entries(s.result.saga_id)
    assert sorted(e.phase.value for e in entries if e.tool) == ["EXECUTED"] * 2 + ["INTENT"] * 2
    assert [e.phase for e in entries][-2:] == [Phase.RUN_ENDED, Phase.SAGA_CLOSED]


async def test_a_run_cancelled_while_an_outcome_is_written_behind_does_not_lose_it():
    """The run's task is cancelled while a call's EXECUTED waits behind it: the entry is still
    written (the write is not part of the cancelled task) and the chain verifies."""
    journal = BehindJournal()

    @function_tool
    @compensable(undo=_undo)
    async def book(room: str) -> str:
        """Book."""
        return f"booked {room}"

    @function_tool
    async def wait(x: int) -> str:
        """Blocks until cancelled."""
        await asyncio.sleep(30)
        return "never"

    model = scripted([("book", {"room": "1"}, "c1")], [("wait", {"x": 1}, "c2")], "done")
    s = Sagacity(journal)
    run = asyncio.ensure_future(s.run(Agent(name="a", model=model, tools=[book, wait]), "go",
                                      saga_id="cancelled-1"))
    for _ in range(12_000):  # a minute at most, however loaded the machine
        await asyncio.sleep(0.005)
        if journal.waiting:
            break
    assert journal.waiting == 1
    run.cancel()
    journal.gate.set()
    try:
        await run
    except asyncio.CancelledError:
        pass
    for _ in range(6_000):  # a minute at most, however loaded the machine
        entries = await journal.entries("cancelled-1")
        if any(e.phase is Phase.EXECUTED for e in entries):
            break
        await asyncio.sleep(0.01)
    assert [(e.phase, e.call_id) for e in entries if e.phase is Phase.EXECUTED] == [
        (Phase.EXECUTED, "c1")]
    (verified,) = await verify_journal(journal, "cancelled-1")
    assert verified.ok


async def test_a_sync_call_writes_its_outcome_behind_as_an_async_call_does():
    """One call path: a sync body's outcome goes behind it too (the worker thread does not wait
    for the EXECUTED entry), and the saga still waits for it before it settles."""
    from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
    from sagacity_agents.core.saga import Saga

    journal = BehindJournal()
    saga = Saga(journal)
    await saga.begin_run("a")
    decl = ToolDeclaration(name="book", reversibility=Reversibility.COMPENSATABLE, undo=_undo)
    result = await asyncio.wait_for(
        asyncio.to_thread(saga.run_call_sync, decl, "book", "c1", {"room": "1"}, lambda: "booked"), 10)
    assert result == "booked"
    assert journal.waiting == 1  # the EXECUTED append is still waiting, behind the call
    journal.gate.set()
    assert await saga.settle() == 0
    entries = await journal.entries(saga.saga_id)
    assert [e.phase for e in entries if e.tool == "book"] == [Phase.INTENT, Phase.EXECUTED]
    await saga.finish(error=None, close=True)

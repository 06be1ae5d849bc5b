"""Outcomes written behind their calls (a journal's ``writes_outcomes_behind``; PostgreSQL's
``fast_outcomes``): a successful call's result goes back to the agent without waiting for its
EXECUTED entry; the entries still land in the order the calls ended, the saga waits for them
before it decides anything (verdict, compensation, end of run), and an entry that cannot be
written leaves the call in doubt, never hidden.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import (
    JournalWriteError,
    Phase,
    PostgresJournal,
    Sagacity,
    SagaStatus,
    compensable,
    saga_output_guardrail,
    verify_journal,
)
from sagacity_agents.core.memory_journal import InMemoryJournal
from tests.pg import admin_connect

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

    async def append(self, saga_id: str, phase: Phase, **kwargs: Any):  # type: ignore[no-untyped-def]
        if phase is Phase.EXECUTED:
            if self.fail_executed:
                raise JournalWriteError("journal down for outcomes")
            if self.delay:
                await asyncio.sleep(self.delay)
            else:
                self.waiting += 1
                await self.gate.wait()
        return await super().append(saga_id, phase, **kwargs)


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
    for _ in range(200):
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
    for _ in range(100):
        entries = await journal.entries("cancelled-1")
        if any(e.phase is Phase.EXECUTED for e in entries):
            break
        await asyncio.sleep(0.01)
    assert [(e.phase, e.call_id) for e in entries if e.phase is Phase.EXECUTED] == [
        (Phase.EXECUTED, "c1")]
    (verified,) = await verify_journal(journal, "cancelled-1")
    assert verified.ok


# --- outcomes held for the next INTENT (PostgreSQL, fast_outcomes with an outcome_linger) -------

class _SlowSecondTurn(ScriptedModel):
    """A scripted model whose second turn takes ``delay`` seconds (a model thinking)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay, self.turns = delay, 0

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        self.turns += 1
        if self.turns == 2:
            await asyncio.sleep(self.delay)
        return await super().get_response(*args, **kwargs)


def _xmins(uri: str, saga_id: str) -> dict[tuple[str, str | None], int]:
    """The inserting transaction of each tool entry, by (phase, call id)."""
    with admin_connect(uri) as conn:
        rows = conn.execute(
            "SELECT phase, call_id, xmin::text::bigint FROM sagacity_journal "
            "WHERE saga_id = %s AND tool IS NOT NULL", (saga_id,)
        ).fetchall()
    return {(phase, call_id): xmin for phase, call_id, xmin in rows}


def _two_reserves(model: ScriptedModel) -> Agent[Any]:
    @function_tool
    @compensable(undo=_undo)
    async def reserve(item: str) -> str:
        """Reserve."""
        return f"reserved {item}"

    model.enqueue([function_call("reserve", {"item": "a"}, call_id="c1")])
    model.enqueue([function_call("reserve", {"item": "b"}, call_id="c2")])
    model.enqueue([assistant_message("done")])
    return Agent(name="a", model=model, tools=[reserve])


async def test_a_held_outcome_rides_with_the_next_intent_and_the_last_one_with_the_run_end(pg_uri):
    """The first call's EXECUTED is written by the second call's INTENT transaction (one round
    trip, one commit); the last call's EXECUTED does not wait out the linger (60 s here): the end
    of the run sends it."""
    sagacity = Sagacity(PostgresJournal(pg_uri, fast_outcomes=True, outcome_linger=60.0))
    try:
        started = time.monotonic()
        result = await sagacity.run(_two_reserves(ScriptedModel()), "go")
        assert time.monotonic() - started < 30
        assert result.status is SagaStatus.COMPLETED
        entries = await sagacity.journal.entries(result.saga_id)
    finally:
        await sagacity.aclose()
    assert [(e.phase.value, e.call_id) for e in entries if e.tool] == [
        ("INTENT", "c1"), ("EXECUTED", "c1"), ("INTENT", "c2"), ("EXECUTED", "c2")]
    xmin = _xmins(pg_uri, result.saga_id)
    assert xmin[("EXECUTED", "c1")] == xmin[("INTENT", "c2")]
    assert xmin[("EXECUTED", "c2")] not in (xmin[("INTENT", "c2")], xmin[("INTENT", "c1")])


async def test_a_held_outcome_is_written_alone_once_the_linger_has_passed(pg_uri):
    """No INTENT within the linger (the model takes 0.5 s over its next turn): the outcome is
    written on its own, before the model answers, and the next INTENT is a transaction of its
    own."""
    journal = PostgresJournal(pg_uri, fast_outcomes=True, outcome_linger=0.05)
    sagacity = Sagacity(journal)
    seen: list[list[str]] = []

    class Watching(_SlowSecondTurn):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            response = await super().get_response(*args, **kwargs)
            if self.turns == 2:  # the model has thought for 0.5 s: the linger passed long ago
                ids = await journal.saga_ids()
                seen.append([f"{e.phase.value}:{e.call_id}"
                             for e in await journal.entries(ids[-1]) if e.tool])
            return response

    try:
        result = await sagacity.run(_two_reserves(Watching(0.5)), "go")
        assert result.status is SagaStatus.COMPLETED
    finally:
        await sagacity.aclose()
    assert seen == [["INTENT:c1", "EXECUTED:c1"]]
    xmin = _xmins(pg_uri, result.saga_id)
    assert len({xmin[("EXECUTED", "c1")], xmin[("INTENT", "c2")], xmin[("INTENT", "c1")]}) == 3


class _BatchFails(PostgresJournal):
    """PostgreSQL, whose first batch carrying an INTENT raises: before it is sent, or after it
    was stored (its acknowledgement lost)."""

    def __init__(self, uri: str, *, stored: bool) -> None:
        super().__init__(uri, fast_outcomes=True, outcome_linger=60.0)
        self.stored, self.failed = stored, 0

    async def append_many(self, saga_id: str, appends: Any) -> Any:
        if not self.failed and any(a["phase"] is Phase.INTENT for a in appends):
            self.failed += 1
            if self.stored:
                await super().append_many(saga_id, appends)
            raise JournalWriteError("connection lost")
        return await super().append_many(saga_id, appends)


@pytest.mark.parametrize("stored", [False, True], ids=["not-stored", "ack-lost"])
async def test_a_batch_that_raises_is_redone_without_one_and_nothing_twice(pg_uri, stored):
    """The held outcome and the INTENT are written again one by one under their write keys:
    whatever the failed batch stored is found, not written twice; the second body runs once."""
    journal = _BatchFails(pg_uri, stored=stored)
    runs: list[str] = []

    @function_tool
    @compensable(undo=_undo)
    async def reserve(item: str) -> str:
        """Reserve."""
        runs.append(item)
        return f"reserved {item}"

    model = scripted([("reserve", {"item": "a"}, "c1")], [("reserve", {"item": "b"}, "c2")], "done")
    sagacity = Sagacity(journal)
    try:
        result = await sagacity.run(Agent(name="a", model=model, tools=[reserve]), "go")
        assert journal.failed == 1
        assert result.status is SagaStatus.COMPLETED
        assert runs == ["a", "b"]
        entries = await journal.entries(result.saga_id)
        assert [(e.phase.value, e.call_id) for e in entries if e.tool] == [
            ("INTENT", "c1"), ("EXECUTED", "c1"), ("INTENT", "c2"), ("EXECUTED", "c2")]
        (verified,) = await verify_journal(journal, result.saga_id)
        assert verified.ok
    finally:
        await sagacity.aclose()


def test_a_negative_outcome_linger_is_refused():
    with pytest.raises(ValueError, match="outcome_linger"):
        PostgresJournal("postgresql://postgres@127.0.0.1:5432/test", fast_outcomes=True,
                        outcome_linger=-0.5)


class _OutcomeBatchFails(PostgresJournal):
    """PostgreSQL whose first batch of outcomes alone raises after storing them (ack lost)."""

    def __init__(self, uri: str, *, fail: bool) -> None:
        super().__init__(uri, fast_outcomes=True, outcome_linger=60.0)
        self.fail, self.batches = fail, 0

    async def append_many(self, saga_id: str, appends: Any) -> Any:
        if all(a["phase"] is Phase.EXECUTED for a in appends):
            self.batches += 1
            if self.fail and self.batches == 1:
                await super().append_many(saga_id, appends)
                raise JournalWriteError("connection lost")
        return await super().append_many(saga_id, appends)


@pytest.mark.parametrize("fail", [False, True], ids=["batch", "batch-ack-lost"])
async def test_outcomes_held_together_are_sent_in_one_batch_in_end_order(pg_uri, fail):
    """Three calls of one turn end within the linger: the end of the run sends their EXECUTED
    entries as one batch (one transaction); a batch whose acknowledgement is lost is redone one
    by one under the same write keys: each stored once."""
    journal = _OutcomeBatchFails(pg_uri, fail=fail)

    @function_tool
    @compensable(undo=_undo)
    async def reserve(item: str) -> str:
        """Reserve."""
        await asyncio.sleep({"a": 0.0, "b": 0.02, "c": 0.04}[item])  # ends in order a, b, c
        return f"reserved {item}"

    turn = [("reserve", {"item": i}, f"c-{i}") for i in "abc"]
    sagacity = Sagacity(journal)
    try:
        result = await sagacity.run(Agent(name="a", model=scripted(turn, "done"), tools=[reserve]), "go")
        assert result.status is SagaStatus.COMPLETED
        entries = await journal.entries(result.saga_id)
        (verified,) = await verify_journal(journal, result.saga_id)
        assert verified.ok
    finally:
        await sagacity.aclose()
    assert journal.batches == 1
    executed = [e.call_id for e in entries if e.phase is Phase.EXECUTED]
    assert executed == ["c-a", "c-b", "c-c"]
    if not fail:
        xmin = _xmins(pg_uri, result.saga_id)
        assert len({xmin[("EXECUTED", c)] for c in executed}) == 1

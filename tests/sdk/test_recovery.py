"""Recovery of a saga whose process died: compensation from the journal alone."""

from __future__ import annotations

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.errors import SagaStateError

from .helpers import agent, scripted


def tools(log):
    @function_tool
    @compensable(undo=lambda ctx: log.append(("undo", ctx.args["n"], ctx.idempotency_key)))
    async def step(n: int) -> int:
        return n

    return step


async def crashed_saga(journal, *, undo_started: bool = False, undo_done: bool = False):
    """Journal what a process leaves when it dies: two executed calls, one call in flight."""
    sid = "crashed-1"
    await journal.append(sid, Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
    seqs = []
    for n in (1, 2):
        intent = await journal.append(sid, Phase.INTENT, write_key=f"c{n}:intent", tool="step",
                                      call_id=f"c{n}", payload={"args": {"n": n}, "reversibility": "compensatable"})
        done = await journal.append(sid, Phase.EXECUTED, write_key=f"c{n}:outcome", tool="step",
                                    call_id=f"c{n}", payload={"intent_seq": intent.seq, "result": n})
        seqs.append(done.seq)
    await journal.append(sid, Phase.INTENT, write_key="c3:intent", tool="step", call_id="c3",
                         payload={"args": {"n": 3}, "reversibility": "compensatable"})
    if undo_started:
        start = await journal.append(sid, Phase.COMPENSATING, write_key=f"undo:{seqs[1]}:1:start",
                                     tool="step", call_id="c2",
                                     payload={"target_seq": seqs[1], "idempotency_key": "k", "attempt": 1,
                                              "claimant": "dead-writer"})
        if undo_done:
            await journal.append(sid, Phase.COMPENSATED, write_key=f"undo:{seqs[1]}:1:end", tool="step",
                                 call_id="c2", payload={"target_seq": seqs[1], "compensating_seq": start.seq})
    return sid


async def test_recover_undoes_executed_calls_and_reports_the_call_in_flight():
    journal = InMemoryJournal()
    log: list = []
    sid = await crashed_saga(journal)
    result = await Sagacity(journal).recover(sid, agent(scripted(), tools(log)))
    assert [entry[1] for entry in log] == [2, 1]
    assert result.status is SagaStatus.IN_DOUBT
    assert [i.call_id for i in result.report.in_doubt] == ["c3"]
    entries = await journal.entries(sid)
    # Closed is terminal: a saga left IN_DOUBT stays open for recovery (its run ended).
    assert entries[-1].phase is Phase.RUN_ENDED and entries[-1].payload["status"] == "IN_DOUBT"
    assert not any(e.phase is Phase.SAGA_CLOSED for e in entries)
    from sagacity_agents.render import saga_status

    assert saga_status(entries) == "IN_DOUBT (open: recover it)"  # what `journal list` shows
    again = await Sagacity(journal).recover(sid, agent(scripted(), tools(log)))
    assert again.status is SagaStatus.IN_DOUBT  # c3 is still in doubt: a human decides
    assert [entry[1] for entry in log] == [2, 1]  # no undo applied twice


async def test_recover_refuses_a_saga_closed_cleanly():
    journal = InMemoryJournal()
    log: list = []
    sid = await crashed_saga(journal)
    # c3's outcome first: no run closes a saga with a call in doubt (core/structure.py)
    await journal.append(sid, Phase.FAILED, write_key="c3:outcome", tool="step", call_id="c3",
                         payload={"intent_seq": 6, "error": "stopped"})
    await journal.append(sid, Phase.SAGA_CLOSED, write_key="saga:closed", payload={"status": "COMPENSATED"})
    with pytest.raises(SagaStateError, match="closed"):
        await Sagacity(journal).recover(sid, agent(scripted(), tools(log)))


async def test_recover_never_applies_a_compensated_undo_twice():
    journal = InMemoryJournal()
    log: list = []
    sid = await crashed_saga(journal, undo_started=True, undo_done=True)
    result = await Sagacity(journal).recover(sid, agent(scripted(), tools(log)))
    assert [entry[1] for entry in log] == [1]  # c2 was already compensated before the crash
    assert sorted(i.call_id for i in result.report.undone) == ["c1", "c2"]


async def test_recover_leaves_an_interrupted_undo_in_doubt():
    journal = InMemoryJournal()
    log: list = []
    sid = await crashed_saga(journal, undo_started=True, undo_done=False)
    result = await Sagacity(journal).recover(sid, agent(scripted(), tools(log)))
    assert [entry[1] for entry in log] == [1]
    assert {i.call_id for i in result.report.in_doubt} == {"c2", "c3"}
    assert result.status is SagaStatus.IN_DOUBT


async def test_an_outcome_landing_after_an_in_doubt_run_is_undone_by_recover():
    """A sync body the SDK cannot stop outlives the in-flight wait: the saga ends IN_DOUBT and is
    not closed (closed is terminal); its EXECUTED lands later; recovering the saga undoes it."""
    import asyncio
    import time

    from sagacity_agents import no_undo

    journal = InMemoryJournal()
    log: list = []

    @function_tool
    @compensable(undo=lambda ctx: log.append("undo-slow"))
    def slow_booking() -> str:
        time.sleep(0.6)
        return "booked late"

    @function_tool(failure_error_function=None)
    @no_undo
    async def boom() -> str:
        await asyncio.sleep(0.05)
        raise RuntimeError("boom")

    sagacity = Sagacity(journal, in_flight_timeout=0.1)
    model = scripted([("slow_booking", {}, "s1"), ("boom", {}, "b1")], "x")
    first = await sagacity.run(agent(model, slow_booking, boom), "go")
    assert first.status is SagaStatus.IN_DOUBT
    # A real wait: the body's thread finishes and journals EXECUTED after RUN_ENDED (however long
    # a loaded machine takes; the body sleeps 0.6 s).
    while (entries := await journal.entries(first.saga_id))[-1].phase is Phase.RUN_ENDED:
        await asyncio.sleep(0.05)
    assert entries[-1].phase is Phase.EXECUTED
    assert not any(e.phase is Phase.SAGA_CLOSED for e in entries)
    recovered = await sagacity.recover(first.saga_id, agent(scripted(), slow_booking, boom))
    assert recovered.status is SagaStatus.COMPENSATED and log == ["undo-slow"]
    closes = [e for e in await journal.entries(first.saga_id) if e.phase is Phase.SAGA_CLOSED]
    assert [c.payload["status"] for c in closes] == ["COMPENSATED"]

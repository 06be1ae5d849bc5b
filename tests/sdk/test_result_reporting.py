"""What a result and the journal say about calls (issue 7, item 8): every in-doubt call named,
bytes results kept as bytes."""

from __future__ import annotations

import base64

from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable, no_undo
from sagacity_agents.backends import InMemoryJournal, Phase

from .helpers import agent, scripted
from .test_recovery import crashed_saga


class LostOutcomeJournal(InMemoryJournal):
    """Never stores the EXECUTED entry of tool ``pay`` (its write fails, every time)."""

    async def append(self, request, **kw):
        phase = request.phase  # views hand the backend an AppendRequest
        if phase is Phase.EXECUTED and request.tool == "pay":
            from sagacity_agents.errors import JournalWriteError

            raise JournalWriteError("disk full")
        return await super().append(request, **kw)


async def test_a_run_that_ends_in_doubt_names_every_call_in_doubt():
    """No call failed, but one outcome never reached the journal: IN_DOUBT, and the result names
    that call (seq of its INTENT, tool, call id), not only the status."""
    journal = LostOutcomeJournal()

    @function_tool
    @no_undo
    async def pay(n: int) -> str:
        return "paid"

    @function_tool
    @no_undo
    async def note(n: int) -> str:
        return "noted"

    model = scripted([("pay", {"n": 1}, "p1"), ("note", {"n": 2}, "n1")], "done")
    result = await Sagacity(journal).run(agent(model, pay, note), "go")
    assert result.status is SagaStatus.IN_DOUBT and result.report is None
    intent = next(e for e in await journal.entries(result.saga_id)
                  if e.phase is Phase.INTENT and e.call_id == "p1")
    assert [(i.seq, i.tool, i.call_id) for i in result.in_doubt] == [(intent.seq, "pay", "p1")]


async def test_recover_names_the_calls_it_leaves_in_doubt():
    journal = InMemoryJournal()
    sid = await crashed_saga(journal)

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def step(n: int) -> int:
        return n

    result = await Sagacity(journal).recover(sid, agent(scripted(), step))
    assert result.status is SagaStatus.IN_DOUBT
    assert [i.call_id for i in result.in_doubt] == ["c3"]


async def test_bytes_results_keep_their_type_in_the_journal_and_reach_the_undo_as_bytes(any_journal):
    """A body returning bytes is journaled as base64 with ``result_type: "bytes"`` beside it (the
    same payload on every backend); the undo gets the bytes back."""
    blob = b"\x00\xffPDF-1.7"
    seen: list = []

    @function_tool
    @compensable(undo=lambda ctx: seen.append(ctx.result))
    def render(doc: str) -> bytes:
        return blob

    @function_tool(failure_error_function=None)
    @no_undo
    def fail() -> str:
        raise RuntimeError("later step failed")

    model = scripted([("render", {"doc": "a"}, "r1")], [("fail", {}, "f1")], "x")
    result = await Sagacity(any_journal).run(agent(model, render, fail), "go")
    assert result.status is SagaStatus.COMPENSATED
    executed = next(e for e in await any_journal.entries(result.saga_id)
                    if e.phase is Phase.EXECUTED and e.tool == "render")
    assert executed.payload == {"intent_seq": executed.seq - 1,
                                "result": base64.b64encode(blob).decode("ascii"),
                                "result_type": "bytes", "fence": executed.payload["fence"]}
    assert seen == [blob]

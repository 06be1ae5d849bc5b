"""Issue 22, item 3: a sync tool's INTENT and outcome go from the SDK's worker thread straight
to a SQLite or memory journal (``append_sync``), with no hop through the event loop; a failed
call still journals through the loop, and the entries are the same as an async tool's."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.core.saga import calls


def _agent(tool, n: int) -> Agent:
    model = ScriptedModel()
    for i in range(n):
        model.enqueue([function_call(tool.name, {"item": f"i{i}"}, call_id=f"c{i}")])
    model.enqueue([assistant_message("done")])
    return Agent(name="a", model=model, tools=[tool])


@pytest.fixture
def hops(monkeypatch):
    """Counts the journal writes a sync tool hands to the event loop."""
    seen: list[object] = []
    real = asyncio.run_coroutine_threadsafe

    def counting(coro, loop):
        seen.append(coro)
        return real(coro, loop)

    monkeypatch.setattr(calls.asyncio, "run_coroutine_threadsafe", counting)
    return seen


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_sync_tool_writes_without_a_hop_to_the_loop(tmp_path, hops, backend):
    @function_tool
    @compensable(undo=lambda ctx: None)
    def reserve(item: str) -> str:
        """Reserve."""
        return f"R-{item}"

    journal = InMemoryJournal() if backend == "memory" else SqliteJournal(tmp_path / "j.db")
    sagacity = Sagacity(journal)
    try:
        result = await sagacity.run(_agent(reserve, 3), "go")
        assert result.status is SagaStatus.COMPLETED
        entries = await journal.entries(result.saga_id)
        assert [e.phase for e in entries].count(Phase.EXECUTED) == 3
        assert all(e.payload.get("fence") == entries[1].seq for e in entries[2:8])
        assert hops == []
        assert all(r.ok for r in await sagacity.verify())
    finally:
        await sagacity.aclose()


async def test_a_failed_sync_call_still_journals_through_the_loop(tmp_path, hops):
    @function_tool
    @compensable(undo=lambda ctx: None)
    def reserve(item: str) -> str:
        """Reserve."""
        raise RuntimeError("sold out")

    journal = SqliteJournal(tmp_path / "j.db")
    sagacity = Sagacity(journal)
    try:
        result = await sagacity.run(_agent(reserve, 1), "go")
        entries = await journal.entries(result.saga_id)
        assert Phase.FAILED in [e.phase for e in entries]
        assert len(hops) == 1  # the FAILED outcome
    finally:
        await sagacity.aclose()

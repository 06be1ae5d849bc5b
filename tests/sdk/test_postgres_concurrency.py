"""PostgreSQL under concurrency, on the documented default pool (10 connections, 10 s wait): no
pooled connection is held across a tool body or a model call, and 200 concurrent sagas of 5
calls each complete in one process. Outcomes asserted, never durations."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase, PostgresJournal


def _reserve_tool(entered: asyncio.Event | None = None, release: asyncio.Event | None = None):
    @function_tool
    @compensable(undo=lambda ctx: None)
    async def reserve(item: str) -> str:
        if entered is not None and release is not None:
            entered.set()
            await release.wait()
        return f"R-{item}"

    return reserve


def _agent(tool, calls: int, model: ScriptedModel | None = None) -> Agent:
    model = model or ScriptedModel()
    for i in range(calls):
        model.enqueue([function_call("reserve", {"item": f"i{i}"}, call_id=f"c{i}")])
    model.enqueue([assistant_message("done")])
    return Agent(name="a", model=model, tools=[tool])


def _checked_out(stats: dict) -> int:
    return stats["pool_size"] - stats["pool_available"]


async def test_no_pooled_connection_is_held_across_a_tool_body(pg_uri):
    journal = PostgresJournal(pg_uri)
    entered, release = asyncio.Event(), asyncio.Event()
    s = Sagacity(journal)
    run = asyncio.ensure_future(s.run(_agent(_reserve_tool(entered, release), 1), "go"))
    try:
        await asyncio.wait_for(entered.wait(), timeout=60)  # the body is running, held
        stats = (await journal.database.pool()).get_stats()
        assert _checked_out(stats) == 0, stats  # the INTENT's connection is back
        assert stats.get("requests_waiting", 0) == 0, stats
    finally:
        release.set()
    assert (await run).status is SagaStatus.COMPLETED
    await journal.close()


class HeldModel(ScriptedModel):
    """A scripted model whose second turn (after the call) waits until released."""

    def __init__(self, entered: asyncio.Event, release: asyncio.Event) -> None:
        super().__init__()
        self.entered, self.release, self.turns = entered, release, 0

    async def get_response(self, *args, **kwargs):
        self.turns += 1
        if self.turns == 2:
            self.entered.set()
            await self.release.wait()
        return await super().get_response(*args, **kwargs)


async def test_no_pooled_connection_is_held_across_a_model_call(pg_uri):
    journal = PostgresJournal(pg_uri)
    entered, release = asyncio.Event(), asyncio.Event()
    s = Sagacity(journal)
    model = HeldModel(entered, release)
    run = asyncio.ensure_future(s.run(_agent(_reserve_tool(), 1, model), "go"))
    try:
        await asyncio.wait_for(entered.wait(), timeout=60)  # the model call after the call
        stats = (await journal.database.pool()).get_stats()
        assert _checked_out(stats) == 0, stats
    finally:
        release.set()
    assert (await run).status is SagaStatus.COMPLETED
    await journal.close()


@pytest.mark.slow
async def test_two_hundred_concurrent_sagas_complete_on_the_default_pool(pg_uri):
    """200 sagas x 5 calls at once in one process, the default pool (10, 10 s): all complete,
    each saga's chain whole (SAGA_OPENED ... SAGA_CLOSED, 5 INTENT/EXECUTED pairs)."""
    journal = PostgresJournal(pg_uri)
    assert journal.database.max_size == 10 and journal.database.pool_timeout == 10.0
    s = Sagacity(journal)
    results = await asyncio.gather(*(s.run(_agent(_reserve_tool(), 5), "go") for _ in range(200)),
                                   return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, failed[:3]
    assert all(r.status is SagaStatus.COMPLETED for r in results)
    for result in results[:20]:
        entries = await journal.entries(result.saga_id)
        phases = [e.phase for e in entries]
        assert phases.count(Phase.EXECUTED) == 5 and phases[-1] is Phase.SAGA_CLOSED
    await journal.close()

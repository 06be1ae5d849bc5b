"""Outcomes held for the next INTENT (PostgreSQL ``fast_outcomes`` with an ``outcome_linger``)
while the batch that carries them is on its way: taken out of the held list, not yet stored. The
saga must still wait for them before it reads its verdict, and outcomes sent later must still land
after them (compensation undoes in reverse order of the outcomes)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from sagacity_agents import Phase, PostgresJournal
from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
from sagacity_agents.core.saga import Saga
from sagacity_agents.core.verdict import read_verdict
from tests.pg import admin_connect

UNDONE: list[str] = []
DECL = ToolDeclaration(name="reserve", reversibility=Reversibility.COMPENSATABLE,
                       undo=lambda ctx: UNDONE.append(ctx.call_id))


class _Gated(PostgresJournal):
    """PostgreSQL, where an EXECUTED of a call id in ``gates`` (alone or in a batch) waits for
    its gate before it is sent: a write slowed on its way (a connection being replaced)."""

    def __init__(self, uri: str, *gated: str) -> None:
        super().__init__(uri, fast_outcomes=True, outcome_linger=60.0)
        self.gates = {call_id: asyncio.Event() for call_id in gated}

    async def _wait(self, phase: Phase, call_id: str | None) -> None:
        if phase is Phase.EXECUTED and call_id in self.gates:
            await self.gates[call_id].wait()

    async def append(self, saga_id: str, phase: Phase, **kwargs: Any) -> Any:
        await self._wait(phase, kwargs.get("call_id"))
        return await super().append(saga_id, phase, **kwargs)

    async def append_many(self, saga_id: str, appends: Any) -> Any:
        for spec in appends:
            await self._wait(spec["phase"], spec.get("call_id"))
        return await super().append_many(saga_id, appends)


def _body(release: asyncio.Event | None = None) -> Callable[[], Awaitable[str]]:
    async def body() -> str:
        if release is not None:
            await release.wait()
        return "reserved"

    return body


def _call(saga: Saga, call_id: str, release: asyncio.Event | None = None) -> asyncio.Task[str]:
    return asyncio.create_task(saga.run_call(DECL, "reserve", call_id, {"item": call_id},
                                             _body(release)))


async def _executed(journal: PostgresJournal, saga_id: str) -> list[str | None]:
    return [e.call_id for e in await journal.entries(saga_id) if e.phase is Phase.EXECUTED]


async def _settle_and_undo(saga: Saga) -> list[str]:
    UNDONE.clear()
    saga.fail_now("test", None, "undo everything")
    await saga.finish(error=None, close=True)
    return list(UNDONE)


_WAITING = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND (classid::bigint << 32 | objid::bigint) = hashtextextended(%s, 0)")


async def test_a_verdict_waits_for_a_held_outcome_whose_batch_queues_on_the_saga_lock(pg_uri):
    """Another process holds the saga's advisory lock: the second call's INTENT, carrying the
    first call's held EXECUTED, queues for it. A verdict read meanwhile must wait for that
    outcome, not report the first call in doubt."""
    journal = PostgresJournal(pg_uri, fast_outcomes=True, outcome_linger=60.0)
    saga = Saga(journal, in_flight_timeout=10)
    await saga.begin_run("a")
    try:
        await _call(saga, "c1")  # its EXECUTED is held
        with admin_connect(pg_uri) as other:
            other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (saga.saga_id,))
            second = _call(saga, "c2")
            for _ in range(200):  # until the batch waits for the lock
                await asyncio.sleep(0.01)
                if other.execute(_WAITING, (saga.saga_id,)).fetchone() == (1,):
                    break
            else:
                raise AssertionError("the batch never queued for the saga's lock")
            verdict = asyncio.create_task(read_verdict(saga))
            await asyncio.sleep(0.2)
            other.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (saga.saga_id,))
        await second
        read = await verdict  # c2 itself may still be running then: only c1 is asked about
        assert "c1" not in [i.call_id for i in read.in_doubt]
        assert [i.call_id for i in read.to_undo] == ["c1"]
    finally:
        await saga.finish(error=None, close=True)
        await journal.close()


async def test_an_outcome_sent_while_a_batch_carries_an_earlier_one_lands_after_it(pg_uri):
    """c1 ends (held); c3's INTENT takes it into a batch that is slow on its way; c2 ends and a
    verdict sends its outcome. c2's EXECUTED must follow c1's (the order the calls ended), so
    compensation undoes c2 before c1."""
    journal = _Gated(pg_uri, "c1")
    saga = Saga(journal, in_flight_timeout=10)
    await saga.begin_run("a")
    try:
        release_c2 = asyncio.Event()
        c2 = _call(saga, "c2", release_c2)
        await asyncio.sleep(0.1)  # c2's INTENT is written, its body waits
        await _call(saga, "c1")
        c3 = _call(saga, "c3")  # batch [EXECUTED c1, INTENT c3], held back by the gate
        await asyncio.sleep(0.05)
        release_c2.set()
        await c2
        verdict = asyncio.create_task(read_verdict(saga))  # sends c2's held outcome
        await asyncio.sleep(0.2)
        journal.gates["c1"].set()
        await asyncio.gather(c3, verdict)
        assert (await _executed(journal, saga.saga_id))[:2] == ["c1", "c2"]
        assert await _settle_and_undo(saga) == ["c3", "c2", "c1"]
    finally:
        await journal.close()


async def test_a_batch_waits_for_an_outcome_sent_while_it_waited_for_an_earlier_one(pg_uri):
    """c1's outcome is sent alone and is slow; c4's INTENT waits for it before taking the held
    outcomes; meanwhile c2's outcome is sent alone (after c1's), and c3 ends (held). When c1's
    lands, c4's batch must not carry c3's outcome past c2's: outcomes keep the order calls
    ended."""
    journal = _Gated(pg_uri, "c1", "c2")
    saga = Saga(journal, in_flight_timeout=10)
    await saga.begin_run("a")
    try:
        release = {c: asyncio.Event() for c in ("c2", "c3")}
        late = {c: _call(saga, c, release[c]) for c in ("c2", "c3")}
        await asyncio.sleep(0.1)  # both INTENTs written, both bodies wait
        await _call(saga, "c1")
        first = asyncio.create_task(saga.outcomes_written())  # c1's outcome, alone: gated
        release["c2"].set()
        await late["c2"]
        c4 = _call(saga, "c4")  # waits for c1's outcome before taking the held ones
        await asyncio.sleep(0.05)
        second = asyncio.create_task(saga.outcomes_written())  # c2's outcome, alone: gated
        release["c3"].set()
        await late["c3"]  # c3's outcome is held
        journal.gates["c1"].set()
        await asyncio.sleep(0.3)
        journal.gates["c2"].set()
        await asyncio.gather(first, second, c4)
        assert (await _executed(journal, saga.saga_id))[:3] == ["c1", "c2", "c3"]
        assert await _settle_and_undo(saga) == ["c4", "c3", "c2", "c1"]
    finally:
        await journal.close()


async def test_a_sync_call_after_an_async_one_writes_its_outcome_after_the_held_one(pg_uri):
    """An async call ends (its EXECUTED held), then a sync tool runs in a worker thread: its
    INTENT must carry the held outcome, so its own EXECUTED (written at once) follows it and
    compensation undoes the sync call first."""
    journal = PostgresJournal(pg_uri, fast_outcomes=True, outcome_linger=60.0)
    saga = Saga(journal, in_flight_timeout=10)
    await saga.begin_run("a")
    try:
        await _call(saga, "c1")
        await asyncio.to_thread(saga.run_call_sync, DECL, "reserve", "c2", {"item": "c2"},
                                lambda: "reserved")
        assert await _executed(journal, saga.saga_id) == ["c1", "c2"]
        assert await _settle_and_undo(saga) == ["c2", "c1"]
    finally:
        await journal.close()

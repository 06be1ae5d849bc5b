"""Both sides of the E-05 tests: crashed sagas, a far-side store that counts applied undos by
idempotency key, and the recovery worker run in tasks and in spawned processes."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sqlite3
from typing import Any

STEPS = (1, 2, 3)
"""The compensatable calls each crashed saga executed before its process died."""


def far_side_applied(far: str) -> dict[str, int]:
    """How many times the far side applied each idempotency key."""
    with sqlite3.connect(far) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS applied (key TEXT, pid INTEGER)")
        return dict(conn.execute("SELECT key, COUNT(*) FROM applied GROUP BY key").fetchall())


def _apply(far: str, key: str) -> None:
    with sqlite3.connect(far, timeout=30) as conn:
        conn.execute("PRAGMA synchronous=OFF")  # a test double: speed over durability
        conn.execute("CREATE TABLE IF NOT EXISTS applied (key TEXT, pid INTEGER)")
        conn.execute("INSERT INTO applied VALUES (?, ?)", (key, os.getpid()))


def step_agent(far: str) -> Any:
    """An agent whose tool ``step`` is compensatable; its undo is applied at the far side,
    which counts applications per idempotency key (no deduplication there: a second
    application would show)."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel

    from sagacity_agents import compensable

    async def cancel_step(ctx: Any) -> None:
        await asyncio.sleep(0.002)  # let a concurrent writer interleave
        _apply(far, ctx.idempotency_key)

    @function_tool
    @compensable(undo=cancel_step)
    async def step(n: int) -> int:
        return n

    return Agent(name="steps", model=ScriptedModel(), tools=[step])


async def crash_saga(journal: Any, saga_id: str) -> None:
    """Journal what a run leaves when its process is killed after three EXECUTED steps: a
    RUN_STARTED whose lease has long expired and no RUN_ENDED (the journal's clock must be in
    the past for that)."""
    from sagacity_agents.backends import Phase

    await journal.append(saga_id, Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
    await journal.append(saga_id, Phase.RUN_STARTED, write_key="run:dead",
                         payload={"agent": "steps", "holder": "host:1:dead", "lease_seconds": 5.0,
                                  "took_over": None})
    for n in STEPS:
        intent = await journal.append(saga_id, Phase.INTENT, write_key=f"c{n}:intent", tool="step",
                                      call_id=f"c{n}",
                                      payload={"args": {"n": n}, "reversibility": "compensatable"})
        await journal.append(saga_id, Phase.EXECUTED, write_key=f"c{n}:outcome", tool="step",
                             call_id=f"c{n}", payload={"intent_seq": intent.seq, "result": n})


class CrashClock:
    """The journal's clock: an hour behind while the crashed sagas are written (their run's
    lease is long expired by now), the real time once :attr:`now` is set (the recoveries'
    own leases must not look expired)."""

    def __init__(self) -> None:
        self.behind = dt.timedelta(hours=1)

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc) - self.behind

    def catch_up(self) -> None:
        """From now on, the real time."""
        self.behind = dt.timedelta(0)


async def recover_once(journal: Any, far: str, saga_id: str, how: str) -> str:
    """One recovery of ``saga_id``: ``how`` is ``"recover"`` (``Sagacity.recover``: lease, then
    compensation) or ``"compensate"`` (the core compensation step alone, no lease: only the
    COMPENSATING claim stands between two writers). Returns what happened, as text."""
    from sagacity_agents import SagacityError, Sagacity
    from sagacity_agents.core.compensation import compensate
    from sagacity_agents.sdk.binding import bind_agent

    agent = step_agent(far)
    try:
        if how == "recover":
            result = await Sagacity(journal, lease_seconds=5.0).recover(saga_id, agent)
            return result.status.value
        from sagacity_agents.saga import Saga

        saga = Saga(journal, saga_id)
        bind_agent(saga, agent)
        report = await compensate(journal, saga_id, saga.declarations)
        return "claimed-elsewhere" if any("claimed by another writer" in i.detail
                                          for i in report.in_doubt) else "compensated"
    except SagacityError as exc:
        return f"refused: {type(exc).__name__}"


def process_worker(db: str, far: str, saga_ids: list[str], how: str, barrier: Any, out: Any) -> None:
    """A spawned process: recover each saga in turn, meeting the other process at a barrier
    before each one so that both start it together."""
    from agents import set_tracing_disabled

    from sagacity_agents.backends import SqliteJournal

    set_tracing_disabled(True)

    async def main() -> list[str]:
        journal = SqliteJournal(db, synchronous="NORMAL")  # survives a process crash; faster
        outcomes = []
        try:
            for saga_id in saga_ids:
                await asyncio.to_thread(barrier.wait, 60)
                outcomes.append(await recover_once(journal, far, saga_id, how))
        finally:
            await journal.close()
        return outcomes

    out.put(asyncio.run(main()))

"""A saga killed before its first run started: a saga given its id is opened (SAGA_OPENED) on
its own, before its RUN_STARTED; a process killed in between leaves a saga with no run lease.
``recover --all`` names it (nothing ran) and closes it, on SQLite and PostgreSQL; one opened a
moment ago is left alone (its first run may be about to start)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from sagacity_agents.backends import Phase
from sagacity_agents.core.recovery import never_started, recovery_reason
from sagacity_agents.stores import open_journal

from tests import forked

from . import app

pytestmark = pytest.mark.multiprocess

SAGA_ID = "opened-then-killed"


def open_then_die(location: str) -> None:
    """The child: run a saga given its id; killed (SIGKILL) right before its RUN_STARTED."""
    from agents import set_tracing_disabled

    from sagacity_agents import Sagacity
    from sagacity_agents.testing import make_failing

    set_tracing_disabled(True)

    async def main() -> None:
        journal = make_failing(app.killed_journal(location), phase=Phase.RUN_STARTED, crash=True)
        sagacity = Sagacity(journal, lease_seconds=app.LEASE_SECONDS)
        await sagacity.run(app.agent("booked"), "go", saga_id=SAGA_ID)

    asyncio.run(main())


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_uri"))
    return str(tmp_path / "journal.db")


async def _entries(location: str) -> list[Any]:
    journal = open_journal(location)
    try:
        return await journal.entries(SAGA_ID)
    finally:
        await journal.close()


async def _recover_all(location: str) -> list[tuple[str, str, Any]]:
    from sagacity_agents import Sagacity

    sagacity = Sagacity(location, lease_seconds=app.LEASE_SECONDS)
    try:
        return await sagacity.recover_all(app.agent())
    finally:
        await sagacity.aclose()


def test_recover_all_names_and_closes_a_saga_killed_before_its_run_started(location, tmp_path):
    child = forked.context().Process(target=open_then_die, args=(location,))
    child.start()
    child.join(60)
    assert child.exitcode == -9
    entries = asyncio.run(_entries(location))
    assert [e.phase for e in entries] == [Phase.SAGA_OPENED]
    assert "before RUN_STARTED" in (recovery_reason(entries) or "")

    done = asyncio.run(_recover_all(location))
    assert [(sid, "before RUN_STARTED" in why) for sid, why, _ in done] == [(SAGA_ID, True)]
    assert done[0][2].status.value == "COMPENSATED"  # nothing to undo; closed
    after = asyncio.run(_entries(location))
    assert after[-1].phase is Phase.SAGA_CLOSED
    assert asyncio.run(_recover_all(location)) == []


def test_a_saga_opened_a_moment_ago_is_not_selected():
    from sagacity_agents.testing import FrozenClock, InMemoryJournal

    async def opened() -> list[Any]:
        journal = InMemoryJournal(clock=FrozenClock())
        await journal.append("s", Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
        return await journal.entries("s")

    entries = asyncio.run(opened())
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)  # FrozenClock's default start
    assert never_started(entries, start + dt.timedelta(seconds=5), grace=30) is None
    assert recovery_reason(entries, start + dt.timedelta(seconds=5)) is None
    assert never_started(entries, start + dt.timedelta(seconds=31), grace=30) is not None

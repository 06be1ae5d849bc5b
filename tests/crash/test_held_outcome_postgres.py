"""SIGKILL while a call's outcome is held for the next INTENT (PostgreSQL, ``fast_outcomes``
with an ``outcome_linger``; docs/postgres.md): the result went back to the agent, the EXECUTED
entry never reached the server. What must hold is the fast-outcomes rule: the call is in doubt,
as if the process had died right after the body, reported to a human and never undone blindly.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agents import set_tracing_disabled

from sagacity_agents import Phase, PostgresJournal, Sagacity, SagaStatus

from . import app
from .test_sigkill_recovery import ctx, _wait_for_expiry  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow


def test_killed_with_an_outcome_held_leaves_the_call_in_doubt_not_undone(
    ctx, pg_uri: str, tmp_path: Path  # noqa: F811 - the fixture
) -> None:
    far = str(tmp_path / "far.db")
    child = ctx.Process(target=app.crash_with_held_outcome, args=(pg_uri, far))
    child.start()
    child.join(60)
    assert child.exitcode == -9, f"the child was not killed (exit {child.exitcode})"
    assert app.applications(far) == {("book-room", "Lyon"): 1}  # the effect exists

    async def phases() -> list[str]:
        journal = PostgresJournal(pg_uri)
        try:
            return [e.phase.value for e in await journal.entries(app.HELD_SAGA_ID)]
        finally:
            await journal.close()

    # The INTENT is durable; the EXECUTED died with the process.
    assert asyncio.run(phases()) == ["SAGA_OPENED", "RUN_STARTED", "INTENT"]
    _wait_for_expiry(pg_uri, app.HELD_SAGA_ID)

    async def recover() -> tuple[SagaStatus, list[str], list[str]]:
        set_tracing_disabled(True)
        sagacity = Sagacity(pg_uri, lease_seconds=app.LEASE_SECONDS)
        try:
            result = await sagacity.recover(app.HELD_SAGA_ID, app.room_agent())
        finally:
            await sagacity.aclose()
        report = result.report
        assert report is not None
        return (result.status, [i.tool or "" for i in report.in_doubt],
                [i.tool or "" for i in report.undone])

    status, in_doubt, undone = asyncio.run(recover())
    assert (status, in_doubt, undone) == (SagaStatus.IN_DOUBT, ["book_room"], [])
    assert app.applications(far) == {("book-room", "Lyon"): 1}  # never cancelled blindly
    assert Phase.INTENT.value in asyncio.run(phases())

"""A human's "not run" races a stalled body, with two real processes, on SQLite and PostgreSQL.

The child runs the trip with a 3 s lease; its hotel body starts and the parent SIGSTOPs the
child there (the stalled worker: a suspended VM, a stopped container). The parent's recovery is
refused until the lease expires, then takes the saga over, undoes the flight and reports the
hotel in doubt; a human answers "not run" (by a resolver whose clock is a day ahead: past the
call's deadline and a lease period). In one order the parent's next recovery closes the saga
first. Then the child is SIGCONTed: its hotel books and its EXECUTED is journaled late (after the
close in the second order: the saga is REOPENED). The next recovery undoes the hotel with the
EXECUTED's result and its report names the contradicted answer.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
from typing import Any

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.journal import utc_now
from sagacity_agents.core.ledger import is_closed, reopened_by
from sagacity_agents.errors import SagaStateError
from sagacity_agents.saga import Recovery

from tests import forked
from tests.sdk import fence_worker
from tests.sdk.test_fencing_processes import _wait_for

SAGA = "trip-sigstop"
LEASE = 3.0


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path) -> str:
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "j.db")


def _ahead() -> dt.datetime:
    return utc_now() + dt.timedelta(days=1)


def _journal(db: str, **options):  # noqa: ANN202
    if db.startswith("postgresql"):
        from sagacity_agents.backends.postgres.journal import PostgresJournal

        return PostgresJournal(db, **options)
    from sagacity_agents.backends.sqlite.journal import SqliteJournal

    return SqliteJournal(db, **options)


async def _take_over(s: Sagacity, tools) -> object:
    """Recover, refused while the stopped child's lease looks held (it is never renewed)."""
    refused = 0
    while True:
        try:
            return await s.recover(SAGA, tools)
        except SagaStateError as exc:
            assert "lease" in str(exc)
            refused += 1
            assert refused < 600
            await asyncio.sleep(0.1)


def _start_trip(db: str, folder) -> tuple[Any, Any]:  # noqa: ANN001
    """The child running the trip (its hotel stalls), and the queue it reports its end on."""
    ctx = forked.context()
    out = ctx.Queue()
    child = ctx.Process(target=fence_worker.stalled_run, args=(db, str(folder), SAGA, LEASE, out))
    child.start()
    return child, out


def _log_lines(folder) -> list[str]:  # noqa: ANN001
    log = folder / "log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("close_first", [False, True], ids=["answer-then-outcome", "close-then-outcome"])
async def test_a_stopped_body_that_books_after_a_not_run_answer_is_undone(db, tmp_path, close_first):
    child, out = _start_trip(db, tmp_path)
    s, resolver = Sagacity(db, lease_seconds=LEASE), Sagacity(_journal(db, clock=_ahead))
    tools = fence_worker.trip_agent(tmp_path)  # the same declarations: recovery's undos
    lines = lambda: _log_lines(tmp_path)  # noqa: E731
    stopped = False
    try:
        await _wait_for(lambda: "hotel started" in lines())
        os.kill(child.pid, signal.SIGSTOP)
        stopped = True
        first = await _take_over(s, tools)
        assert first.status is SagaStatus.IN_DOUBT and [i.tool for i in first.in_doubt] == ["book_hotel"]
        answer = await Recovery(resolver.journal, resolver.approvals, clock=_ahead).resolve(
            SAGA, first.in_doubt[0].seq, ran=False, resolver="ops", reason="no booking on the far side")
        if close_first:
            closing = await s.recover(SAGA, tools)
            assert closing.status is SagaStatus.COMPENSATED
        (tmp_path / "release").write_text("go")
        os.kill(child.pid, signal.SIGCONT)
        stopped = False
        status, error = await asyncio.to_thread(out.get, True, 120)
        assert (status, error) == (SagaStatus.LEASE_LOST.value, "LeaseLostError")
        assert "hotel" in lines() and "charged" not in lines()
        entries = await s.journal.entries(SAGA)
        (executed,) = [e for e in entries if e.phase is Phase.EXECUTED and e.tool == "book_hotel"]
        assert executed.payload["late"] is True and executed.seq > answer.seq
        assert (reopened_by(entries) is not None) is close_first
        assert verify_entries(SAGA, entries).ok

        final = await s.recover(SAGA, tools)
        assert final.status is SagaStatus.COMPENSATED, final.report
        assert lines().count("undo hotel") == 1 and lines().count("undo flight") == 1
        entries = await s.journal.entries(SAGA)
        (undo,) = [e for e in entries if e.phase is Phase.COMPENSATING and e.tool == "book_hotel"]
        assert undo.payload["target_seq"] == executed.seq  # undone from the call's own outcome
        (said,) = final.report.contradicted
        assert said.tool == "book_hotel"
        assert f"(seq {answer.seq}) was contradicted by the call's own outcome (seq {executed.seq})" \
            in said.detail
        assert is_closed(entries) and verify_entries(SAGA, entries).ok
    finally:
        (tmp_path / "release").write_text("go")
        if stopped:
            os.kill(child.pid, signal.SIGCONT)
        child.join(60)
        await resolver.aclose()
        await s.aclose()

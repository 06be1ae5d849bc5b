"""The stalled worker of issue 18 (R-01) with two processes, on SQLite and PostgreSQL, in real
time: a 3 s lease, a run whose hotel blocks its event loop until the other process has taken the
saga over (necessarily well past the lease: the taker is refused until then) and recovered it."""

from __future__ import annotations

import asyncio
import time

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.errors import LeaseLostError, SagaStateError
from sagacity_agents.core.chain import verify_entries

from tests import forked
from . import fence_worker

pytestmark = pytest.mark.case("R-01")

SAGA = "trip-2p"
LEASE = 3.0


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path) -> str:
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "j.db")


async def _wait_for(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_two_processes_stalled_worker_stops_and_its_late_outcome_is_undone(db, tmp_path):
    log = tmp_path / "log"
    lines = lambda: log.read_text().splitlines() if log.exists() else []  # noqa: E731
    ctx = forked.context()
    out = ctx.Queue()
    proc = ctx.Process(target=fence_worker.stalled_run, args=(db, str(tmp_path), SAGA, LEASE, out))
    proc.start()
    s = Sagacity(db, lease_seconds=LEASE)
    tools = fence_worker.trip_agent(tmp_path)  # one set of declarations: recovery's undos
    try:
        await _wait_for(lambda: "hotel started" in lines())
        refused = 0
        while True:  # refused while the stalled run's lease looks held: until it expires
            try:
                first = await s.recover(SAGA, tools)
                break
            except SagaStateError as exc:
                assert "lease" in str(exc)
                refused += 1
                await asyncio.sleep(0.2)
        assert refused > 0  # the lease was honoured while it lasted
        assert first.status is SagaStatus.IN_DOUBT
        assert [i.tool for i in first.in_doubt] == ["book_hotel"]
        (tmp_path / "release").write_text("go")
        status, error = await asyncio.to_thread(out.get, True, 120)
        assert status == SagaStatus.LEASE_LOST.value
        assert error in {c.__name__ for c in LeaseLostError.__subclasses__()} | {"LeaseLostError"}
        assert "charged" not in lines()
        entries = await s.journal.entries(SAGA)
        late = [e for e in entries if e.phase is Phase.EXECUTED and e.payload.get("late")]
        assert [e.tool for e in late] == ["book_hotel"]
        assert not [e for e in entries if e.phase is Phase.SAGA_CLOSED]
        assert verify_entries(SAGA, entries).ok

        final = await s.recover(SAGA, tools)
        assert final.status is SagaStatus.COMPENSATED and not final.report.still_dirty, final.report
        assert lines().count("undo hotel") == 1 and lines().count("undo flight") == 1
        assert verify_entries(SAGA, await s.journal.entries(SAGA)).ok
    finally:
        (tmp_path / "release").write_text("go")
        proc.join(60)
        await s.aclose()

"""One run at a time per saga (the run lease), and what "closed" means (issue 7 item 6, F-07)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.errors import SagaStateError
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.lease import lease_of

from tests import forked
from . import lease_worker
from .helpers import agent, scripted

SAGA = "order-42"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def journal(request, tmp_path):
    if request.param == "postgres":  # the lease's conditional append under the advisory lock
        from sagacity_agents.backends import PostgresJournal

        j = PostgresJournal(request.getfixturevalue("pg_uri"))
    else:
        j = InMemoryJournal() if request.param == "memory" else SqliteJournal(tmp_path / "j.db")
    yield j
    await j.close()


def booking(log: list, release: asyncio.Event, name: str, n: int):
    # built again around another event by each attempt: one scope for all of them
    @function_tool
    @compensable(undo=lambda ctx: log.append(("undo", ctx.args["n"])), scope="bookings")
    async def book(n: int) -> str:
        log.append(("book-start", n))
        await asyncio.wait_for(release.wait(), timeout=60)  # both running at once would hang
        log.append(("booked", n))
        return f"booked {n}"

    return agent(scripted([("book", {"n": n}, f"b{n}")], "done"), book, name=name)


@pytest.mark.case("F-07")
async def test_gather_two_runs_on_one_saga_one_runs_one_refused(journal):
    """F-07: gather(s.run(a1, saga_id="order-42"), s.run(a2, saga_id="order-42")): one runs,
    one raises SagaStateError before writing anything; the first caller's effects are never
    undone by the other."""
    log: list = []
    release = asyncio.Event()
    s = Sagacity(journal)

    async def attempt(a):
        try:
            return await s.run(a, "go", saga_id=SAGA)
        except SagaStateError as exc:
            release.set()  # the refused one lets the running one finish
            return exc

    r1, r2 = await asyncio.gather(attempt(booking(log, release, "a1", 1)),
                                  attempt(booking(log, release, "a2", 2)))
    results = [r for r in (r1, r2) if not isinstance(r, Exception)]
    refused = [r for r in (r1, r2) if isinstance(r, SagaStateError)]
    assert len(results) == 1 and len(refused) == 1
    assert "running elsewhere" in str(refused[0]) and "lease" in str(refused[0])
    assert results[0].status is SagaStatus.COMPLETED
    n = 1 if results[0] is r1 else 2
    assert log == [("book-start", n), ("booked", n)]  # never undone, the other never ran
    entries = await journal.entries(SAGA)
    assert [e.phase for e in entries].count(Phase.RUN_STARTED) == 1  # the loser wrote nothing
    assert [e.phase for e in entries].count(Phase.SAGA_OPENED) == 1
    assert entries[-2].phase is Phase.RUN_ENDED and entries[-1].phase is Phase.SAGA_CLOSED
    assert verify_entries(SAGA, entries).ok


async def test_an_idle_open_saga_is_told_apart_from_a_running_one(journal):
    """RUN_ENDED releases the lease: a close=False saga takes its next run at once; a run that
    holds the lease refuses a run, a resume, a recover and a close before writing anything."""
    log: list = []
    release = asyncio.Event()
    release.set()
    s = Sagacity(journal)
    first = await s.run(booking(log, release, "a1", 1), "go", saga_id=SAGA, close=False)
    assert first.status is SagaStatus.OPEN
    lease = lease_of(await journal.entries(SAGA))
    assert lease is not None and lease.ended and not lease.held()
    blocked = asyncio.Event()
    running = asyncio.ensure_future(s.run(booking(log, blocked, "a2", 2), "go", saga_id=SAGA))
    while ("book-start", 2) not in log:
        await asyncio.sleep(0.01)
    before = len(await journal.entries(SAGA))
    with pytest.raises(SagaStateError, match="lease"):
        await s.run(booking(log, release, "a3", 3), "go", saga_id=SAGA)
    with pytest.raises(SagaStateError, match="lease"):
        await s.recover(SAGA, booking(log, release, "a3", 3))
    with pytest.raises(SagaStateError, match="lease"):
        await s.close_saga(SAGA)
    with pytest.raises(SagaStateError, match="lease"):
        await s.resume(SAGA, booking(log, release, "a3", 3))
    assert len(await journal.entries(SAGA)) == before  # refused before anything was written
    blocked.set()
    assert (await running).status is SagaStatus.COMPLETED
    assert not any(entry[0] == "undo" for entry in log)


async def test_a_closed_saga_is_terminal(journal):
    log: list = []
    release = asyncio.Event()
    release.set()
    s = Sagacity(journal)
    done = await s.run(booking(log, release, "a1", 1), "go", saga_id=SAGA)
    assert done.status is SagaStatus.COMPLETED
    for attempt in (lambda: s.run(booking(log, release, "a2", 2), "go", saga_id=SAGA),
                    lambda: s.recover(SAGA, booking(log, release, "a2", 2)),
                    lambda: s.close_saga(SAGA)):
        with pytest.raises(SagaStateError, match="closed"):
            await attempt()
    entries = await journal.entries(SAGA)
    assert entries[-1].phase is Phase.SAGA_CLOSED and verify_entries(SAGA, entries).ok


async def test_a_long_tool_body_keeps_its_lease_renewed(journal):
    """A body that writes nothing for longer than the lease: the saga's own task journals
    LEASE_RENEWED, so another run is still refused (no takeover of a live run)."""
    log: list = []
    release = asyncio.Event()
    s = Sagacity(journal, lease_seconds=0.6)
    running = asyncio.ensure_future(s.run(booking(log, release, "a1", 1), "go", saga_id=SAGA))
    while ("book-start", 1) not in log:
        await asyncio.sleep(0.01)
    await asyncio.sleep(1.5)  # longer than the lease: only renewals keep it
    with pytest.raises(SagaStateError, match="lease"):
        await s.run(booking(log, release, "a2", 2), "go", saga_id=SAGA)
    release.set()
    assert (await running).status is SagaStatus.COMPLETED
    phases = [e.phase for e in await journal.entries(SAGA)]
    assert Phase.LEASE_RENEWED in phases
    assert phases.count(Phase.RUN_STARTED) == 1


# --- two processes --------------------------------------------------------------------------
def _spawn(target, *args) -> multiprocessing.process.BaseProcess:
    proc = forked.context().Process(target=target, args=args)
    proc.start()
    return proc


@pytest.mark.case("F-07")
@pytest.mark.multiprocess
def test_two_processes_on_one_saga_one_runs_one_refused(tmp_path):
    """F-07 across processes (SQLite): one process runs, the other is refused; the running one
    completes and nothing is undone."""
    ctx = forked.context()
    barrier, out = ctx.Barrier(2), ctx.Queue()
    db = str(tmp_path / "j.db")
    procs = [_spawn(lease_worker.run_order, db, str(tmp_path), n, barrier, out) for n in (1, 2)]
    for proc in procs:
        proc.join(timeout=120)
    reports = sorted(out.get(timeout=5) for _ in procs)
    assert [r[0] for r in reports] == ["ok", "refused"], reports
    ok = reports[0]
    assert ok[2] == "COMPLETED" and "lease" in reports[1][2]
    assert (tmp_path / f"booked-{ok[1]}").exists()
    assert not list(tmp_path.glob("undone-*"))
    other = 3 - ok[1]
    assert not (tmp_path / f"started-{other}").exists()

    async def check() -> None:
        j = SqliteJournal(db)
        entries = await j.entries("order-42")
        await j.close()
        assert [e.phase for e in entries].count(Phase.RUN_STARTED) == 1
        assert verify_entries("order-42", entries).ok

    asyncio.run(check())


@pytest.mark.case("F-07")
@pytest.mark.multiprocess
@pytest.mark.parametrize("later", ["run", "recover"])
def test_a_killed_holder_is_taken_over_after_its_lease_expires(tmp_path, later):
    """F-07: the first holder is SIGKILLed mid-call; while it lived its lease refused others;
    after the expiry a later run or recover takes the saga over (journaled in took_over)."""
    ctx = forked.context()
    out = ctx.Queue()
    db = str(tmp_path / "j.db")
    proc = _spawn(lease_worker.run_order, db, str(tmp_path), 1, None, out, 1.0)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started-1").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (tmp_path / "started-1").exists()
    async def attempt() -> object:
        s = Sagacity(db, lease_seconds=1.0)
        try:
            gate = asyncio.Event()
            gate.set()
            log: list = []
            a = booking(log, gate, "later", 2)
            if later == "run":
                return await s.run(a, "go", saga_id="order-42")
            return await s.recover("order-42", a)
        except SagaStateError as exc:
            return exc
        finally:
            await s.aclose()

    assert isinstance(asyncio.run(attempt()), SagaStateError)  # alive: its keeper renews
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=30)
    result = asyncio.run(attempt())
    deadline = time.monotonic() + 30
    while isinstance(result, SagaStateError) and time.monotonic() < deadline:
        time.sleep(0.2)
        result = asyncio.run(attempt())
    assert not isinstance(result, Exception), result
    # The killed call has no outcome: in doubt, never undone blindly; the saga stays open.
    assert result.status is SagaStatus.IN_DOUBT  # type: ignore[attr-defined]
    assert not (tmp_path / "undone-1").exists()

    async def check() -> None:
        j = SqliteJournal(db)
        entries = await j.entries("order-42")
        await j.close()
        starts = [e for e in entries if e.phase is Phase.RUN_STARTED]
        assert len(starts) == 2
        assert starts[1].payload["took_over"]["holder"] == starts[0].payload["holder"]
        assert not any(e.phase is Phase.SAGA_CLOSED for e in entries)
        assert verify_entries("order-42", entries).ok

    asyncio.run(check())
    assert not Path(tmp_path / "booked-1").exists()  # killed mid-call


async def test_completed_unclosed_reads_the_last_run_end_only():
    """What recovery treats as "completed, only SAGA_CLOSED lost" (the crash matrix kills a
    child there): the newest RUN_ENDED says COMPLETED and only run bookkeeping follows it."""
    from sagacity_agents.core.lease import completed_unclosed

    journal = InMemoryJournal()
    n = iter(range(100))

    async def add(phase: Phase, **payload: object) -> list:
        await journal.append("s", phase, write_key=f"k{next(n)}", payload=payload or None)
        return await journal.entries("s")

    await add(Phase.SAGA_OPENED, metadata={})
    await add(Phase.RUN_STARTED, holder="h1")
    assert not completed_unclosed(await add(Phase.RUN_ENDED, holder="h1", status="OPEN"))
    await add(Phase.RUN_STARTED, holder="h2")
    assert completed_unclosed(await add(Phase.RUN_ENDED, holder="h2", status="COMPLETED"))
    assert completed_unclosed(await add(Phase.RUN_STARTED, holder="recover-killed"))
    await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c", payload={"args": {}})
    assert not completed_unclosed(await journal.entries("s"))  # a later run did something
    assert not completed_unclosed(await add(Phase.SAGA_FAILED, reason="x"))


async def test_a_saga_closed_between_the_read_and_the_run_started_is_refused_as_closed():
    """Two recoveries at once: the loser read the saga open, the winner closed it, and the
    loser's conditional RUN_STARTED meets the close. It is refused with SagaStateError (nothing
    written), like any run on a closed saga, not a raw JournalClosedError."""
    from sagacity_agents.backends import InMemoryJournal, Phase
    from sagacity_agents.core.lease import acquire_lease
    from sagacity_agents.errors import SagaStateError

    journal = InMemoryJournal()
    await journal.append("s1", Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
    before_close = await journal.entries("s1")
    await journal.append("s1", Phase.SAGA_CLOSED, write_key="saga:closed", payload={"status": "COMPLETED"})
    stale = journal.entries

    async def entries_as_read_before_the_close(saga_id):
        return list(before_close) if saga_id == "s1" else await stale(saga_id)

    journal.entries = entries_as_read_before_the_close  # type: ignore[method-assign]
    with pytest.raises(SagaStateError, match="is closed"):
        await acquire_lease(journal, "s1", holder="h", seconds=5, agent="recover")
    journal.entries = stale  # type: ignore[method-assign]
    assert [e.phase for e in await journal.entries("s1")] == [Phase.SAGA_OPENED, Phase.SAGA_CLOSED]

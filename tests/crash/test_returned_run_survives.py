"""A run that returned is never undone by a recovery: issue 37's crash rule ("a kill or power loss
at any point after a run returned its result never makes a recovery undo that run"), which any
saving on the one-call runs of ``bench/durable_cost.py`` must keep.

The runs: one-call runs through ``Sagacity.run`` with a scripted model, one compensatable call
each (``reserve(n)``, whose undo the far side records), either as separate sagas (each closed by
its run) or as runs of one saga kept open (``close=False``: the benchmark's shape). Recovery is
the public ``recover --all`` (``Sagacity.recover_all``).

* **Kill** (SQLite, PostgreSQL): a child process runs them and SIGKILLs itself right after run k
  returned, right before or right after the next run's RUN_STARTED, or at a random moment after
  the first run returned. No call of a run that returned is undone, its saga is not selected
  (nothing dirty, nothing in doubt), every saga verifies. (The next run of a saga kept open is
  the saga's again once its RUN_STARTED is written: a crash then compensates the saga as a whole,
  earlier runs included; that is the saga's unit, not a lost run, and is not tested here.)
* **Power loss** (SQLite): a kill loses nothing the operating system holds; a power cut loses what
  was not synced. The test records, at every ``fdatasync`` of the journal's ``-wal`` file (the only
  sync the journal makes: ``SqliteJournal._sync_wal``), the highest rowid committed then, and
  takes that mark the moment ``run`` returns. A power cut after that moment leaves the rows up to
  some commit at or after the mark (WAL frames reach the disk in order, and a frame lost
  invalidates every later one); the test recovers every row prefix from the mark on, a superset.
  None may undo the run; the prefix just before the run's RUN_ENDED must (the check can fail: it
  is what a RUN_ENDED committed without waiting for the disk would leave).
* **Power loss** (PostgreSQL, a server crash): the run's end must be a commit that waits for the
  WAL flush, for runs that close their saga and runs that keep it open: read inside each COMMIT
  by a deferred trigger (``tests/pg.py``, ``at_commit_trigger``), outcomes committed with
  ``synchronous_commit = off`` or not.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.core.evidence import verify_sagas
from sagacity_agents.core.recovery import recovery_reason
from sagacity_agents.stores import open_journal
from sagacity_agents.testing import make_failing

from tests import forked
from tests.pg import admin_connect, at_commit_trigger

from . import app

pytestmark = pytest.mark.multiprocess

RUNS = 3
"""One-call runs per child (the deterministic kill points)."""
RANDOM_RUNS = 8
"""One-call runs per child killed at a random moment."""
KILLED_AFTER = 2
"""The run after whose return the deterministic kill points are."""

_far_side: list[Path] = []
"""Where ``reserve`` and its undo write, the last one (pushed by whoever runs them: the child,
the test's runs and recoveries through the :func:`far` fixture, each recovery of a cut)."""


def _apply(kind: str, n: int) -> None:
    """One line ``"<kind> <n>"`` on the far side (an O_APPEND write: whole, in order)."""
    with open(_far_side[-1], "a", encoding="utf-8") as far:
        far.write(f"{kind} {n}\n")


def _applied(path: Path, kind: str) -> set[int]:
    """The ``n`` of every ``kind`` line on the far side at ``path``."""
    if not path.exists():
        return set()
    lines = path.read_text(encoding="utf-8").split()
    return {int(n) for k, n in zip(lines[::2], lines[1::2], strict=True) if k == kind}


def _cancel(ctx: Any) -> None:
    _apply("cancel", int(ctx.args["n"]))


@function_tool
@compensable(undo=_cancel)
async def reserve(n: int) -> str:
    """Reserve item n."""
    _apply("reserve", n)
    return f"reserved {n}"


@function_tool
@compensable(undo=_cancel)
def reserve_sync(n: int) -> str:
    """Reserve item n."""
    _apply("reserve", n)
    return f"reserved {n}"


def _agent(n: int | None, tool: Any = reserve) -> Agent[Any]:
    """Run ``n``'s agent: one call of ``tool`` (``reserve`` or ``reserve_sync``) with ``n``, then
    a final answer (``None``: the answer only, with both tools, for recovery)."""
    model = ScriptedModel()
    if n is not None:
        model.enqueue([function_call(tool.name, {"n": n}, call_id=f"c{n}")])
    model.enqueue([assistant_message("done")])
    tools = [tool] if n is not None else [reserve, reserve_sync]
    return Agent(name="one-call", model=model, tools=tools)


def _saga_of(shape: str, n: int) -> str:
    return "one-saga" if shape == "one-saga" else f"saga-{n}"


async def _one_call_runs(sagacity: Sagacity, shape: str, runs: int, tool: Any = reserve,
                         returned: Any = None) -> None:
    """``runs`` one-call runs; ``returned(n)`` right after run ``n`` returned."""
    for n in range(1, runs + 1):
        result = await sagacity.run(_agent(n, tool), "go", saga_id=_saga_of(shape, n),
                                    close=shape == "sagas")
        expected = SagaStatus.COMPLETED if shape == "sagas" else SagaStatus.OPEN
        assert result.status is expected, (result.status, result.exception)
        if returned is not None:
            returned(n)


# --- the kill --------------------------------------------------------------------------------

def run_then_die(location: str, far: str, shape: str, kill: str, delay: float) -> None:
    """The child: one-call runs on ``location``, killed (SIGKILL) at ``kill``: ``at-return`` (right
    after run :data:`KILLED_AFTER` returned), ``before-next-start`` / ``after-next-start`` (the
    next run's RUN_STARTED), ``random`` (``delay`` seconds after the first run returned). Each run
    that returned is logged on the far side (``returned n``) before anything else happens."""
    set_tracing_disabled(True)
    _far_side.append(Path(far))

    def returned(n: int) -> None:
        _apply("returned", n)
        if kill == "at-return" and n == KILLED_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)
        if kill == "random" and n == 1:
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()

    async def main() -> None:
        journal: Any = app.killed_journal(location)
        if kill.endswith("next-start"):
            starts = itertools.count(1)
            journal = make_failing(
                journal, when=lambda a: a.phase is Phase.RUN_STARTED
                and next(starts) == KILLED_AFTER + 1,
                after_write=kill == "after-next-start", crash=True)
        sagacity = Sagacity(journal, lease_seconds=app.LEASE_SECONDS)
        await _one_call_runs(sagacity, shape, RANDOM_RUNS if kill == "random" else RUNS,
                             returned=returned)
        time.sleep(30)  # every run returned before the timer fired: it kills the process here

    asyncio.run(main())


KILLS = [("sagas", "at-return"), ("sagas", "before-next-start"), ("sagas", "after-next-start"),
         ("sagas", "random"), ("one-saga", "at-return"), ("one-saga", "before-next-start")]


@pytest.fixture
def far(tmp_path: Path) -> Any:
    """This test's far side (a file of lines), for its runs and its recoveries."""
    _far_side.append(tmp_path / "far.log")
    yield _far_side[-1]
    _far_side.pop()


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_uri"))
    return str(tmp_path / "journal.db")


async def _recover_all(location: str) -> list[tuple[str, str, Any]]:
    sagacity = Sagacity(location, lease_seconds=app.LEASE_SECONDS)
    try:
        return await sagacity.recover_all(_agent(None))
    finally:
        await sagacity.aclose()


async def _read(location: str) -> tuple[dict[str, Any], list[Any]]:
    """Every saga's entries, and every saga's verdict."""
    journal = open_journal(location)
    try:
        ids = await journal.saga_ids()
        return {s: await journal.entries(s) for s in ids}, await verify_sagas(journal)
    finally:
        await journal.close()


@pytest.mark.parametrize("shape,kill", KILLS, ids=[f"{s}-{k}" for s, k in KILLS])
def test_a_kill_after_a_run_returned_never_undoes_it(location, far, shape, kill):
    delay = random.uniform(0.0, 0.05)  # noqa: S311 - a moment, not a secret
    child = forked.context().Process(target=run_then_die,
                                     args=(location, str(far), shape, kill, delay))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL, child.exitcode
    returned = _applied(far, "returned")
    if kill != "random":
        assert returned == set(range(1, KILLED_AFTER + 1))
    assert returned, f"killed {delay:.3f} s after run 1 returned, before it was logged?"
    ours = {_saga_of(shape, n) for n in returned}

    sagas, verdicts = asyncio.run(_read(location))
    assert [v.ok for v in verdicts] == [True] * len(verdicts), verdicts
    assert {s: recovery_reason(sagas[s]) for s in ours} == dict.fromkeys(ours)

    # The run killed is recovered: undone, or its call in doubt when a random kill cut it.
    ended = {SagaStatus.COMPENSATED} | ({SagaStatus.IN_DOUBT} if kill == "random" else set())
    for _ in range(2):  # and a second recovery (an IN_DOUBT saga is selected again)
        done = asyncio.run(_recover_all(location))
        assert not ours & {saga_id for saga_id, _, _ in done}, (returned, done)
        assert not _applied(far, "cancel") & returned, (returned, done, far.read_text())
        assert {getattr(result, "status", result) for _, _, result in done} <= ended, done
    assert len(done) <= (kill in ("after-next-start", "random")), done
    assert all(v.ok for v in asyncio.run(_read(location))[1])


# --- power loss (SQLite) ---------------------------------------------------------------------

class DurableMark:
    """The highest journal rowid a sync of the ``-wal`` file covered so far: every ``fdatasync``
    of a file named ``*-wal`` (``os.fdatasync``, which ``SqliteJournal._sync_wal`` looks up per
    call) is passed on, then the rows committed by then are read on a connection of its own. The
    journal's commits are serialized under its connection's lock, which the sync runs under."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = path
        self.rowid = 0
        self.syncs = 0
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            real(fd)
            if os.readlink(f"/proc/self/fd/{fd}").endswith("-wal"):
                self.syncs += 1
                self.rowid = _max_rowid(self.path)

        monkeypatch.setattr(os, "fdatasync", fdatasync)


def _max_rowid(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT coalesce(max(rowid), 0) FROM sagacity_journal").fetchone()
        return int(row[0])
    finally:
        conn.close()


def _rows(path: Path) -> list[tuple[int, str, str]]:
    """``(rowid, saga_id, phase)`` of every journal row, in commit order."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT rowid, saga_id, phase FROM sagacity_journal ORDER BY rowid").fetchall()
    finally:
        conn.close()


async def _recover_prefix(path: Path, cut: int, work: Path) -> tuple[list[Any], set[int]]:
    """Recover a copy of the journal at ``path`` holding its rows up to rowid ``cut`` (what a
    power cut leaves): ``recover --all``'s answer and the calls it undid."""
    copy, far = work / f"cut-{cut}.db", work / f"cut-{cut}.far"
    source, target = sqlite3.connect(path), sqlite3.connect(copy)
    try:
        source.backup(target)
        target.execute("DELETE FROM sagacity_journal WHERE rowid > ?", (cut,))
        target.commit()
    finally:
        source.close()
        target.close()
    _far_side.append(far)
    try:
        return await _recover_all(str(copy)), _applied(far, "cancel")
    finally:
        _far_side.pop()


@pytest.mark.parametrize("tool", [reserve, reserve_sync], ids=["async", "sync"])
@pytest.mark.parametrize("shape", ["sagas", "one-saga"])
async def test_what_was_durable_when_a_run_returned_keeps_it_from_recovery(
        tmp_path, far, monkeypatch, shape, tool):
    path = tmp_path / "journal.db"
    journal = app.killed_journal(str(path))  # stamped an hour back: every lease has expired
    mark = DurableMark(path, monkeypatch)
    marks: dict[int, int] = {}
    sagacity = Sagacity(journal, lease_seconds=app.LEASE_SECONDS)
    try:
        await _one_call_runs(sagacity, shape, RUNS, tool,
                             returned=lambda n: marks.update({n: mark.rowid}))
    finally:
        await sagacity.aclose()
    rows = _rows(path)
    ends = [rowid for rowid, _, phase in rows if phase == Phase.RUN_ENDED.value]
    closes = [rowid for rowid, _, phase in rows if phase == Phase.SAGA_CLOSED.value]
    assert len(ends) == RUNS and mark.syncs >= RUNS
    # Every power cut after run n returned leaves it alone...
    last = rows[-1][0] if shape == "sagas" else marks[RUNS]
    cuts = range(marks[1], last + 1) if shape == "sagas" else sorted(marks.values())
    for cut in cuts:
        done, undone = await _recover_prefix(path, cut, tmp_path)
        kept = {n for n, at in marks.items() if at <= cut}
        assert not undone & kept, (cut, kept, undone, done)
        assert not {_saga_of(shape, n) for n in kept} & {s for s, _, _ in done}, (cut, done)
    # ...and the same check would see one whose end was lost (the cut just before it).
    for n, end in enumerate(ends, start=1):
        done, undone = await _recover_prefix(path, end - 1, tmp_path)
        assert n in undone, (n, end, done)
    # What that rests on: each run's end was synced before the run returned.
    for n, end in enumerate(ends, start=1):
        assert end <= marks[n], (n, rows, marks)
    assert all(close <= marks[n] for n, close in enumerate(closes, start=1)), (rows, marks)


# --- power loss (PostgreSQL): the run's end waits for the flush ------------------------------

_COMMITS = "CREATE TABLE sagacity_test_commits (phase text, sync text);" + at_commit_trigger(
    "sagacity_test_commit_sync", """
    INSERT INTO sagacity_test_commits VALUES (NEW.phase, current_setting('synchronous_commit'));""")


@pytest.mark.parametrize("options", [{}, {"durable_outcomes": True}, {"fast_outcomes": True}],
                         ids=["default", "durable", "fast"])
@pytest.mark.parametrize("shape", ["sagas", "one-saga"])
async def test_the_end_of_a_run_commits_synchronously_on_postgres(pg_uri, far, shape, options):
    from sagacity_agents.backends.postgres.journal import PostgresJournal

    with admin_connect(pg_uri) as conn:
        conn.execute(_COMMITS)
    sagacity = Sagacity(PostgresJournal(pg_uri, **options))
    try:
        await _one_call_runs(sagacity, shape, RUNS)
    finally:
        await sagacity.aclose()
        with admin_connect(pg_uri) as conn:
            rows = conn.execute("SELECT phase, sync FROM sagacity_test_commits").fetchall()
            conn.execute("DROP TRIGGER sagacity_test_commit_sync ON sagacity_journal")
            conn.execute("DROP FUNCTION sagacity_test_commit_sync()")
            conn.execute("DROP TABLE sagacity_test_commits")
    ends = [sync for phase, sync in rows if phase in ("RUN_ENDED", "SAGA_CLOSED")]
    assert len(ends) == (2 * RUNS if shape == "sagas" else RUNS), rows
    assert set(ends) == {"on"}, rows

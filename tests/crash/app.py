"""The child side of the SIGKILL crash tests: a trip saga whose process is killed at a chosen point.

The tools and their undos write to a *far side*: a separate SQLite file (``far.db``) that counts
every application per key (a booking, an undo's idempotency key, a wire transfer), as a remote
service would see them. The saga's own journal is another SQLite file with a short run lease; the
process that is killed stamps its entries :data:`STAMPED_AGO` back (its journal's clock is a
``FrozenClock``), so its lease has expired when the test recovers, with no test sleeping for it.

Scenario ``trip``: ``book_hotel`` and ``book_car`` (compensable) succeed, ``book_flight`` fails
(sold out), so the saga compensates: the car's undo, then the hotel's. Scenario ``wire``:
``book_hotel``, then ``wire_deposit`` (irreversible, approved inline) runs after CONSUMED.
Scenario ``booked``: ``book_hotel`` and ``book_car`` succeed and the run completes.

Where the process dies is the ``boundary`` argument (see :data:`BOUNDARIES`): either the journal
wrapper of ``sagacity_agents.testing`` (``crash=True``) kills it right before or right after an
append, or a tool body or an undo kills it after its far-side write.

Run by hand: ``python -m tests.crash.app crash BOUNDARY JOURNAL_DB FAR_DB`` and
``python -m tests.crash.app recover JOURNAL_DB FAR_DB``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from typing import Any

SAGA_ID = "trip-1"
LEASE_SECONDS = 1.0
"""Short run lease: a killed run's lease expires this long after its last entry (long enough
that a live recovery on a loaded machine keeps renewing it: see the lease limits)."""

STAMPED_AGO = 3600.0
"""How far back (seconds) a process that is about to be killed stamps its entries: as if the kill
had happened an hour before the recovery. Only the journal's clock is set back; leases, fences and
the order of entries (by ``seq``) work as with the real clock."""

_FAR_ENV = "CRASH_FAR_DB"
_KILL_ENV = "CRASH_KILL_IN"

# boundary -> (scenario, journal kill point or None, body/undo kill point or None)
# A journal kill point is (phase, tool, after_write): the first such append.
BOUNDARIES: dict[str, tuple[str, tuple[str, str, bool] | None, str | None]] = {
    "before-intent": ("trip", ("INTENT", "book_car", False), None),
    "after-intent": ("trip", ("INTENT", "book_car", True), None),
    "after-effect-before-executed": ("trip", None, "book_car"),
    "after-executed": ("trip", ("EXECUTED", "book_car", True), None),
    "during-first-undo": ("trip", None, "undo_car"),
    "after-saga-failed": ("trip", ("SAGA_FAILED", None, True), None),
    "between-undos": ("trip", ("COMPENSATED", "book_car", True), None),
    "during-second-undo": ("trip", None, "undo_hotel"),
    "after-consumed-before-intent": ("wire", ("CONSUMED", "wire_deposit", True), None),
    "after-run-ended-before-close": ("booked", ("RUN_ENDED", None, True), None),
}


# --- the far side ---------------------------------------------------------------------------

def _far() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ[_FAR_ENV], timeout=30, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS applied (kind TEXT, key TEXT, n INTEGER, "
                 "PRIMARY KEY (kind, key))")
    return conn


def apply(kind: str, key: str) -> None:
    """Record one application of ``kind`` (book-hotel, cancel-car, wire...) for ``key``, durably."""
    conn = _far()
    try:
        conn.execute("INSERT INTO applied VALUES (?, ?, 1) ON CONFLICT (kind, key) "
                     "DO UPDATE SET n = n + 1", (kind, key))
    finally:
        conn.close()


def applications(far_db: str) -> dict[tuple[str, str], int]:
    """Every (kind, key) the far side saw, with how many times it was applied."""
    conn = sqlite3.connect(far_db)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS applied (kind TEXT, key TEXT, n INTEGER, "
                     "PRIMARY KEY (kind, key))")
        return {(k, key): n for k, key, n in conn.execute("SELECT kind, key, n FROM applied")}
    finally:
        conn.close()


def _kill_here(point: str) -> None:
    if os.environ.get(_KILL_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


# --- the agent ------------------------------------------------------------------------------

def _undo(kind: str):
    def undo(ctx: Any) -> None:
        apply(f"cancel-{kind}", ctx.idempotency_key)
        _kill_here(f"undo_{kind}")  # the cancellation reached the far side, its outcome did not

    undo.__qualname__ = f"undo_{kind}"
    return undo


def _tools() -> list[Any]:
    from agents import function_tool

    from sagacity_agents import compensable, irreversible

    @function_tool
    @compensable(undo=_undo("hotel"))
    def book_hotel(city: str) -> str:
        """Book a hotel."""
        apply("book-hotel", city)
        return f"hotel in {city}"

    @function_tool
    @compensable(undo=_undo("car"))
    def book_car(city: str) -> str:
        """Book a car."""
        apply("book-car", city)
        _kill_here("book_car")  # the booking exists at the far side, EXECUTED is not journaled
        return f"car in {city}"

    @function_tool
    @compensable(undo=_undo("flight"))
    def book_flight(city: str) -> str:
        """Book a flight (always sold out)."""
        raise RuntimeError(f"no seats to {city}")

    @function_tool(needs_approval=True)
    @irreversible
    def wire_deposit(amount: int) -> str:
        """Pay the deposit (cannot be undone)."""
        apply("wire", str(amount))
        return f"paid {amount}"

    return [book_hotel, book_car, book_flight, wire_deposit]


TOOLS = _tools()


def agent(scenario: str = "none") -> Any:
    """The trip agent; its model plays ``scenario`` (``none``: only a final answer, for recovery)."""
    from agents import Agent
    from agents.testing import ScriptedModel, assistant_message, function_call

    model = ScriptedModel()
    if scenario == "trip":
        for n, tool in enumerate(("book_hotel", "book_car", "book_flight")):
            model.enqueue([function_call(tool, {"city": "Lyon"}, call_id=f"c{n}")])
    elif scenario == "booked":
        for n, tool in enumerate(("book_hotel", "book_car")):
            model.enqueue([function_call(tool, {"city": "Lyon"}, call_id=f"c{n}")])
    elif scenario == "wire":
        model.enqueue([function_call("book_hotel", {"city": "Lyon"}, call_id="c0")])
        model.enqueue([function_call("wire_deposit", {"amount": 500}, call_id="w1")])
    model.enqueue([assistant_message("done")])
    return Agent(name="trip", model=model, tools=list(TOOLS))


# --- the two process bodies -----------------------------------------------------------------

def killed_journal(location: str) -> Any:
    """The journal at ``location`` (a SQLite file or a PostgreSQL URI) for a process the test
    kills: its clock is :data:`STAMPED_AGO` behind (a ``FrozenClock`` ticking 1 ms a reading)."""
    import datetime as dt

    from sagacity_agents.stores import is_postgres_uri
    from sagacity_agents.testing import FrozenClock

    clock = FrozenClock(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=STAMPED_AGO), tick=0.001)
    if is_postgres_uri(location):
        from sagacity_agents.backends.postgres.journal import PostgresJournal

        return PostgresJournal(location, clock=clock)
    from sagacity_agents.backends.sqlite.journal import SqliteJournal

    return SqliteJournal(location, clock=clock)


def crash(boundary: str, journal_db: str, far_db: str) -> None:
    """Run the boundary's scenario on ``journal_db`` (a SQLite file or a PostgreSQL URI) and die
    by SIGKILL at the boundary.

    Returns only if the kill point was never reached (a test failure: the exit code is 0)."""
    from agents import set_tracing_disabled

    from sagacity_agents import Decision, Sagacity
    from sagacity_agents.backends import Phase
    from sagacity_agents.stores import open_journal
    from sagacity_agents.testing import make_failing

    scenario, journal_point, body_point = BOUNDARIES[boundary]
    os.environ[_FAR_ENV] = far_db
    if body_point:
        os.environ[_KILL_ENV] = body_point
    set_tracing_disabled(True)

    async def approve(request: Any) -> Decision:
        return Decision(approved=True, approver="ops", reason="deposit agreed")

    async def main() -> None:
        journal: Any = killed_journal(journal_db)
        if journal_point:
            phase, tool, after_write = journal_point
            journal = make_failing(journal, phase=Phase(phase), tool=tool, after_write=after_write,
                                   crash=True)
        sagacity = Sagacity(journal, lease_seconds=LEASE_SECONDS)
        await sagacity.run(agent(scenario), "plan my trip", saga_id=SAGA_ID, approver=approve)

    asyncio.run(main())


def recover(journal_db: str, far_db: str, kill_in: str | None = None) -> dict[str, Any]:
    """Recover the saga from ``journal_db``: ``{"status", "in_doubt", "in_doubt_seqs", "undone",
    "approved_not_run"}`` (tool names; the seqs a human answers with ``saga resolve``), or ``{"refused": message}`` when another recovery holds
    the saga or closed it already. ``kill_in`` (``undo_car``, ``undo_hotel``): the recovery
    itself is killed in that undo, after its far-side write."""
    from sagacity_agents import Sagacity
    from sagacity_agents.errors import SagaStateError

    os.environ[_FAR_ENV] = far_db
    os.environ.pop(_KILL_ENV, None)
    if kill_in:
        os.environ[_KILL_ENV] = kill_in

    async def main() -> dict[str, Any]:
        # A recovery the test kills stamps its entries back too (its lease has expired then).
        journal = killed_journal(journal_db) if kill_in else journal_db
        sagacity = Sagacity(journal, lease_seconds=LEASE_SECONDS)
        try:
            result = await sagacity.recover(SAGA_ID, agent())
        except SagaStateError as exc:
            return {"refused": str(exc)}
        finally:
            await sagacity.aclose()
        report = result.report
        return {
            "status": result.status.value,
            "in_doubt": sorted(i.tool or "" for i in report.in_doubt) if report else [],
            "in_doubt_seqs": [i.seq for i in report.in_doubt] if report else [],
            "undone": sorted(i.tool or "" for i in report.undone) if report else [],
            "approved_not_run": sorted(i.tool or "" for i in report.approved_not_run) if report else [],
        }

    return asyncio.run(main())


def recover_into(journal_db: str, far_db: str, out: Any, kill_in: str | None = None) -> None:
    """:func:`recover` in a child process, its answer put on the queue ``out``."""
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    try:
        out.put(recover(journal_db, far_db, kill_in))
    except BaseException as exc:  # noqa: BLE001 - the parent asserts on it
        out.put({"error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "crash":
        crash(*rest)
    else:
        print(json.dumps(recover(*rest)))

"""The child side of the kill -9 -> resolve --ran --undo-data -> recover test: a car booking whose
process is killed after the booking reached the far side, before its EXECUTED.

The far side is a SQLite file (``far.db``) recording each booking and each cancellation, and
what the undo was given (its undo data, the forward call's idempotency key, the INTENT's seq).
The car's undo cancels by ``ctx.undo_data["booking_id"]``, as the README's undo does; it declares
``undo_needs=("booking_id",)``.

Run by hand: ``python -m tests.crash.undo_data_app crash JOURNAL FAR_DB``; recovery and resolve
run through the CLI with ``--app tests.crash.undo_data_app:agent``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from typing import Any

SAGA_ID = "car-1"
LEASE_SECONDS = 1.0
_FAR_ENV = "UNDO_DATA_FAR_DB"


def _far() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ[_FAR_ENV], timeout=30, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS far (kind TEXT, body TEXT)")
    return conn


def record(kind: str, body: dict[str, Any]) -> None:
    """Record one far-side event durably."""
    conn = _far()
    try:
        conn.execute("INSERT INTO far VALUES (?, ?)", (kind, json.dumps(body, sort_keys=True)))
    finally:
        conn.close()


def events(far_db: str) -> list[tuple[str, dict[str, Any]]]:
    """Every far-side event, in order."""
    conn = sqlite3.connect(far_db)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS far (kind TEXT, body TEXT)")
        return [(k, json.loads(b)) for k, b in conn.execute("SELECT kind, body FROM far ORDER BY rowid")]
    finally:
        conn.close()


def cancel_car(ctx: Any) -> None:
    """The car's undo: cancels the booking its undo data names."""
    record("cancel-car", {"booking_id": ctx.undo_data["booking_id"], "intent_seq": ctx.intent_seq,
                          "call_key": ctx.call_idempotency_key, "undo_key": ctx.idempotency_key})


def _tools() -> list[Any]:
    from agents import function_tool

    from sagacity_agents import compensable, current_idempotency_key

    @function_tool
    @compensable(undo=cancel_car, undo_needs=("booking_id",))
    def book_car(city: str) -> str:
        """Book a car."""
        record("book-car", {"booking_id": f"B-{city}", "call_key": current_idempotency_key()})
        if os.environ.get(_FAR_ENV + "_KILL") == "1":
            os.kill(os.getpid(), signal.SIGKILL)  # booked at the far side, no EXECUTED
        return f"car B-{city}"

    return [book_car]


TOOLS = _tools()


def agent(scenario: str = "none") -> Any:
    """The car agent; ``scenario`` ``"book"`` books one car, ``"none"`` only answers."""
    from agents import Agent
    from agents.testing import ScriptedModel, assistant_message, function_call

    model = ScriptedModel()
    if scenario == "book":
        model.enqueue([function_call("book_car", {"city": "Lyon"}, call_id="c1")])
    model.enqueue([assistant_message("done")])
    return Agent(name="car", model=model, tools=list(TOOLS))


def crash(journal_db: str, far_db: str) -> None:
    """Run the booking on ``journal_db`` (its entries stamped an hour back: the lease and the
    call's deadline have passed when the test goes on) and die by SIGKILL in the body."""
    from agents import set_tracing_disabled

    from sagacity_agents import Sagacity

    from .app import killed_journal

    os.environ[_FAR_ENV] = far_db
    os.environ[_FAR_ENV + "_KILL"] = "1"
    set_tracing_disabled(True)

    async def main() -> None:
        sagacity = Sagacity(killed_journal(journal_db), lease_seconds=LEASE_SECONDS)
        await sagacity.run(agent("book"), "book a car", saga_id=SAGA_ID)

    asyncio.run(main())


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "crash":
        crash(*rest)

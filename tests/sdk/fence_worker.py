"""Child-process side of the two-process fencing test (issue 18, R-01), importable when spawned."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any


def trip_agent(folder: Path) -> Any:
    """The trip of ``test_fencing.py`` with files as its log: ``book_hotel`` blocks the event
    loop with ``time.sleep`` until ``release`` exists in ``folder`` (the same code in both
    processes: a declaration's id covers its closure, and recovery finds the undo by it)."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import compensable

    def mark(name: str) -> None:
        with open(folder / "log", "a") as log:
            log.write(name + "\n")

    @function_tool
    @compensable(undo=lambda ctx: mark("undo flight"))
    async def book_flight(to: str) -> str:
        mark("flight")
        return "F1"

    @function_tool
    @compensable(undo=lambda ctx: mark("undo hotel"))
    async def book_hotel(city: str) -> str:
        mark("hotel started")
        deadline = time.monotonic() + 120
        while not (folder / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # a blocked event loop: no lease renewal, no other task
        mark("hotel")
        return "H1"

    @function_tool
    @compensable(undo=lambda ctx: mark("refund card"))
    async def charge_card(amount: int) -> str:
        mark("charged")
        return "C1"

    model = ScriptedModel()
    model.enqueue([function_call("book_flight", {"to": "LIS"}, call_id="f1")])
    model.enqueue([function_call("book_hotel", {"city": "Lisbon"}, call_id="h1")])
    model.enqueue([function_call("charge_card", {"amount": 900}, call_id="c1")])
    model.enqueue([assistant_message("done")])
    return Agent(name="trip", model=model, tools=[book_flight, book_hotel, charge_card])


def stalled_run(db: str, folder: str, saga_id: str, lease_seconds: float, out: Any) -> None:
    """Run the trip on ``saga_id`` with a hotel that stalls; report ``(status, exception type)``."""
    from agents import set_tracing_disabled

    from sagacity_agents import Sagacity

    set_tracing_disabled(True)

    async def main() -> None:
        s = Sagacity(db, lease_seconds=lease_seconds)
        try:
            result = await s.run(trip_agent(Path(folder)), "plan", saga_id=saga_id)
            out.put((result.status.value, type(result.exception).__name__))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out.put(("raised", f"{type(exc).__name__}: {exc}"))
        finally:
            await s.aclose()

    asyncio.run(main())

"""Child-process side of the two-process race of a human's "not run" and a stalled body
(``test_race_processes.py``), importable when the forkserver starts it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any


def trip_agent(folder: Path) -> Any:
    """A flight, a hotel whose body blocks its event loop until ``release`` exists in
    ``folder``, and a card; every step and every undo (with the result it was given) is a line
    of ``folder/log``. The same code in both processes: recovery finds the undos by their
    declaration ids."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import compensable

    def mark(line: str) -> None:
        with open(folder / "log", "a") as log:
            log.write(line + "\n")

    @function_tool
    @compensable(undo=lambda ctx: mark(f"undo flight {ctx.result}"))
    async def book_flight(to: str) -> str:
        mark("flight")
        return "F1"

    @function_tool
    @compensable(undo=lambda ctx: mark(f"undo hotel {ctx.result}"))
    async def book_hotel(city: str) -> str:
        mark("hotel started")
        deadline = time.monotonic() + 120
        while not (folder / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # a blocked event loop: no lease renewal, no other task
        mark("hotel booked")
        return "H1"

    @function_tool
    @compensable(undo=lambda ctx: mark(f"refund card {ctx.result}"))
    async def charge_card(amount: int) -> str:
        mark("charged")
        return "C1"

    model = ScriptedModel()
    model.enqueue([function_call("book_flight", {"to": "LIS"}, call_id="f1")])
    model.enqueue([function_call("book_hotel", {"city": "Lisbon"}, call_id="h1")])
    model.enqueue([function_call("charge_card", {"amount": 900}, call_id="c1")])
    model.enqueue([assistant_message("done")])
    return Agent(name="trip", model=model, tools=[book_flight, book_hotel, charge_card])


def run_trip(db: str, folder: str, saga_id: str, lease_seconds: float, out: Any) -> None:
    """Run the trip on ``saga_id``; report ``(status, exception type name)`` on ``out``."""
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

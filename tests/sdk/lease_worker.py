"""Child-process side of the run-lease tests (F-07), importable by spawned processes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any


def booking_agent(marker_dir: str, n: int) -> Any:
    """An agent whose one call books ``n`` (compensable) and waits for ``release`` in
    ``marker_dir`` (polling: another process creates it)."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import compensable

    folder = Path(marker_dir)

    def undo(ctx: Any) -> None:
        (folder / f"undone-{ctx.args['n']}").write_text("undone")

    @function_tool
    @compensable(undo=undo)
    async def book(n: int) -> str:
        (folder / f"started-{n}").write_text("started")
        deadline = time.monotonic() + 60
        while not (folder / "release").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        (folder / f"booked-{n}").write_text("booked")
        return f"booked {n}"

    model = ScriptedModel()
    model.enqueue([function_call("book", {"n": n}, call_id=f"b{n}")])
    model.enqueue([assistant_message("done")])
    return Agent(name=f"agent-{n}", model=model, tools=[book])


def run_order(db: str, marker_dir: str, n: int, barrier: Any, out: Any, lease_seconds: float = 30.0) -> None:
    """Run agent ``n`` on saga ``order-42``; report ``("ok", status)`` or ``("refused", msg)``.
    A refused run creates ``release`` so the running one can finish."""
    from agents import set_tracing_disabled

    from sagacity_agents import Sagacity
    from sagacity_agents.errors import SagaStateError

    set_tracing_disabled(True)
    if barrier is not None:
        barrier.wait(timeout=60)

    async def main() -> None:
        s = Sagacity(db, lease_seconds=lease_seconds)
        try:
            result = await s.run(booking_agent(marker_dir, n), "go", saga_id="order-42")
            out.put(("ok", n, result.status.value))
        except SagaStateError as exc:
            (Path(marker_dir) / "release").write_text("release")
            out.put(("refused", n, str(exc)))
        finally:
            await s.aclose()

    asyncio.run(main())

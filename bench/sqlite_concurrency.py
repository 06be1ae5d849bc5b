"""Many sagas in one process on one SQLite file: the guard for writing durable appends on an idle
event loop (``backends/sqlite/writer.py``, ``loop_idle``; issue 37).

``--sagas`` runs (default 200) of ``--calls`` tool calls each (default 5, one per model turn,
scripted) run concurrently (``asyncio.gather`` of ``Sagacity.run``) on one ``SqliteJournal``
(``synchronous=FULL``), timed in wall time. Beside them, one more saga whose tool waits
``--idle`` seconds (longer than the load) with a short lease (``--lease`` seconds, the keeper
beating every third of it): its LEASE_RENEWED entries are read back afterwards and the gaps
between them printed against the period (a loop that a flush blocked would stretch them), and a
probe task measures how late the loop runs a 5 ms timer (its lag) during the load.

Run it on two trees to compare (``PYTHONPATH=<tree> python bench/sqlite_concurrency.py``); the
rounds alternate nothing here, so run it several times on each, one after the other.

    python bench/sqlite_concurrency.py [--sagas 200] [--calls 5] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import CompensationContext, Sagacity, SagaStatus, compensable


def _undo(ctx: CompensationContext) -> None:
    """Never run: every run succeeds."""


@function_tool
@compensable(undo=_undo)
async def reserve(item: str) -> str:
    """Reserve ``item``."""
    return f"R-{item}"


def _agent(calls: int, tool: Any = reserve, name: str = "reserve") -> Agent[Any]:
    model = ScriptedModel()
    for i in range(calls):
        model.enqueue([function_call(name, {"item": f"i{i}"}, call_id=f"c{i}")])
    model.enqueue([assistant_message("done")])
    return Agent(name="load", model=model, tools=[tool])


async def _probe(stop: asyncio.Event, lags: list[float]) -> None:
    """How late a 5 ms timer fires, over and over, until ``stop``."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.005)
        lags.append(time.perf_counter() - start - 0.005)


async def one_round(path: Path, sagas: int, calls: int, lease: float, idle: float) -> dict[str, Any]:
    """One load: wall time, the loop's lag, the idle saga's beat gaps."""
    sagacity = Sagacity(str(path), lease_seconds=lease)

    @function_tool
    @compensable(undo=_undo)
    async def wait_long(item: str) -> str:
        """Wait (the idle saga's only call)."""
        await asyncio.sleep(idle)
        return item

    stop, lags = asyncio.Event(), []
    try:
        idle_run = asyncio.ensure_future(sagacity.run(_agent(1, wait_long, "wait_long"), "go", max_turns=5))
        probe = asyncio.ensure_future(_probe(stop, lags))
        await asyncio.sleep(lease / 2)  # the keeper is running
        start = time.perf_counter()
        results = await asyncio.gather(*(sagacity.run(_agent(calls), "go", max_turns=calls + 5)
                                         for _ in range(sagas)))
        wall = time.perf_counter() - start
        stop.set()
        await probe
        idle_result = await idle_run
        bad = [r.status for r in [*results, idle_result] if r.status is not SagaStatus.COMPLETED]
        if bad:
            raise RuntimeError(f"runs ended {bad[:3]}")
        entries = await sagacity.journal.entries(idle_result.saga_id)
    finally:
        await sagacity.aclose()
    beats = [datetime.fromisoformat(e.recorded_at).timestamp() for e in entries if e.phase.value == "LEASE_RENEWED"]
    gaps = [b - a for a, b in zip(beats, beats[1:])]
    return {"wall_s": wall, "per_call_us": wall / (sagas * calls) * 1e6,
            "lag_ms": {"median": statistics.median(lags) * 1e3, "p99": sorted(lags)[int(len(lags) * 0.99)] * 1e3,
                       "max": max(lags) * 1e3, "n": len(lags)},
            "beats": len(beats), "beat_gap_s": {"median": statistics.median(gaps), "max": max(gaps)} if gaps else None,
            "beat_period_s": lease / 3}


async def run_benchmark(sagas: int = 200, calls: int = 5, rounds: int = 3, lease: float = 1.5,
                        idle: float | None = None) -> dict[str, Any]:
    set_tracing_disabled(True)
    out = []
    with tempfile.TemporaryDirectory(prefix="sagacity-concurrency-") as tmp:
        for r in range(rounds):
            wait = idle if idle is not None else 4.0
            out.append(await one_round(Path(tmp) / f"j{r}.db", sagas, calls, lease, wait))
    return {"rounds": out, "sagas": sagas, "calls": calls, "lease_s": lease, "loadavg": os.getloadavg(),
            "wall_s_median": statistics.median(r["wall_s"] for r in out)}


def print_report(result: dict[str, Any]) -> None:
    print(f"{result['sagas']} concurrent sagas x {result['calls']} calls on one SQLite file (FULL); "
          f"load average {tuple(round(x, 2) for x in result['loadavg'])}")
    for i, r in enumerate(result["rounds"]):
        g = r["beat_gap_s"]
        beats = (f"{r['beats']} beats of the idle saga, gap median {g['median']:.3f} s max {g['max']:.3f} s"
                 f" (period {r['beat_period_s']:.3f} s)") if g else f"{r['beats']} beats"
        print(f"  round {i}: wall {r['wall_s']:.2f} s ({r['per_call_us']:.0f} us per call); loop lag of a 5 ms"
              f" timer median {r['lag_ms']['median']:.2f} ms p99 {r['lag_ms']['p99']:.2f} ms max"
              f" {r['lag_ms']['max']:.2f} ms; {beats}")
    print(f"  median wall {result['wall_s_median']:.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sagas", type=int, default=200)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", type=float, default=1.5, help="the idle saga's lease (s)")
    parser.add_argument("--idle", type=float, default=None, help="its tool's wait (s; default 4)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    result = asyncio.run(run_benchmark(args.sagas, args.calls, args.rounds, args.lease, args.idle))
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

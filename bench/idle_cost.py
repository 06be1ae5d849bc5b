"""What waiting costs an agent run on this host, with no database at all.

Runs the 20-call scripted agent of ``bench/overhead.py`` (plain SDK, no saga) three ways,
interleaved round by round in an order drawn afresh each round (``--seed``): the tool returns at once; the tool waits
``--wait-ms`` with ``asyncio.sleep`` (the process idles, as it does while a commit is flushed);
the tool busy-waits the same time (the process never idles). Reported per call: the median run
time minus the no-wait run's, the process's CPU time likewise (``time.process_time``), and the
time the waits really took.

On a host where the run's own code gets slower after an idle wait (seen on a Firecracker VM with
2 shared vCPUs: the CPU time the SDK's turn needs rises after each sleep), a wait costs the run
more than its own length. ``bench/postgres_append.py`` therefore measures one bare INSERT+COMMIT
by what it adds to a run, as it measures the journals' overhead, not by its latency alone.

Usage::

    python bench/idle_cost.py [--rounds 40] [--calls 20] [--wait-ms 1.0] [--seed 1]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agents import Runner, function_tool, set_tracing_disabled

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import _agent, machine_facts  # noqa: E402

KINDS = ("no wait", "asyncio.sleep", "busy wait")


def _tool(kind: str, wait_s: float, waited: list[float]) -> Any:
    @function_tool
    async def reserve(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        start = time.perf_counter()
        if kind == "asyncio.sleep":
            await asyncio.sleep(wait_s)
        elif kind == "busy wait":
            while time.perf_counter() - start < wait_s:
                pass
        if kind != "no wait":
            waited.append(time.perf_counter() - start)
        return f"R-{item}-{qty}"

    return reserve


async def measure(rounds: int, calls: int, wait_ms: float, seed: int = 1) -> dict[str, Any]:
    """Per-call run time, CPU time and real wait of each kind (medians over ``rounds``; ``seed``
    draws each round's order)."""
    set_tracing_disabled(True)
    wall: dict[str, list[float]] = {k: [] for k in KINDS}
    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    waited: dict[str, list[float]] = {k: [] for k in KINDS}
    shuffler = random.Random(seed)
    for round_no in range(rounds + 1):  # round 0 warms up
        # A fresh order each round: no kind always follows the same one.
        for kind in shuffler.sample(KINDS, len(KINDS)):
            tool = _tool(kind, wait_ms / 1000, waited[kind] if round_no else [])
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await Runner.run(_agent(tool, calls), "go", max_turns=calls + 5)
            if round_no:
                wall[kind].append(time.perf_counter() - wall0)
                cpu[kind].append(time.process_time() - cpu0)

    def per_call(series: dict[str, list[float]], kind: str) -> float:
        return statistics.median(
            a - b for a, b in zip(series[kind], series["no wait"], strict=True)) / calls * 1000

    return {
        "machine": machine_facts(), "rounds": rounds, "calls": calls, "wait_ms": wait_ms,
        "seed": seed,
        "per_call_ms": {
            kind: {
                "run_time_added": round(per_call(wall, kind), 3),
                "cpu_time_added": round(per_call(cpu, kind), 3),
                "wait_really_took": round(statistics.median(waited[kind]) * 1000, 3),
            }
            for kind in KINDS[1:]
        },
        "no_wait_run_ms_per_call": round(statistics.median(wall["no wait"]) / calls * 1000, 3),
        "raw": {  # per round, in round order (each round's kinds ran in a fresh order)
            "run_ms": {k: [round(v * 1000, 3) for v in wall[k]] for k in KINDS},
            "cpu_ms": {k: [round(v * 1000, 3) for v in cpu[k]] for k in KINDS},
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--wait-ms", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1, help="seed of each round's run order")
    parser.add_argument("--json", dest="json_out", default=None, help="write the results here")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.rounds, args.calls, args.wait_ms, args.seed))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    m = result["machine"]
    print(f"machine: {m.get('cpu', '?')}, {m['cpu_count']} cores, load {m.get('loadavg', '?')}")
    print(f"no-wait run: {result['no_wait_run_ms_per_call']} ms per call")
    for kind, row in result["per_call_ms"].items():
        print(f"  {kind}: the wait took {row['wait_really_took']} ms; the run got "
              f"{row['run_time_added']} ms per call slower and used {row['cpu_time_added']} ms "
              "more CPU per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

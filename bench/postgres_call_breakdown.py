"""Where a wrapped tool call's time goes with the PostgreSQL journal: inside ``Saga.run_call``
(the INTENT before the body, the outcome after it) versus the whole run's overhead per call.

Runs the 20-call scripted agent of ``bench/overhead.py`` bare and under
``Sagacity(PostgresJournal(uri))`` (the default commit rule; ``--durable``: ``durable_outcomes=True``,
every outcome waits for the WAL flush; ``--fast``: ``fast_outcomes=True``), interleaved, and times every ``run_call``:
before the body (INTENT), after it (outcome), and in all. The paired overhead per call minus the
time in ``run_call`` is what the saga costs outside the call: the run's own entries and the
agent's turn running beside the database.

Usage::

    python bench/postgres_call_breakdown.py [--db URI] [--rounds 30] [--durable | --fast]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from agents import Runner, set_tracing_disabled

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import _agent, _bare_tool, _wrapped_tool  # noqa: E402
from postgres_append import scratch_schema  # noqa: E402

from sagacity_agents import Sagacity  # noqa: E402
from sagacity_agents.backends import PostgresJournal  # noqa: E402
from sagacity_agents.core import saga as saga_module  # noqa: E402

TIMES: dict[str, list[float]] = defaultdict(list)


def _instrument() -> None:
    run_call = saga_module.Saga.run_call

    async def timed(self: Any, decl: Any, tool: str, call_id: Any, args: Any, body: Any,
                    **kwargs: Any) -> Any:
        start, marks = time.perf_counter(), []

        async def timed_body() -> Any:
            marks.append(time.perf_counter())
            try:
                return await body()
            finally:
                marks.append(time.perf_counter())

        try:
            return await run_call(self, decl, tool, call_id, args, timed_body, **kwargs)
        finally:
            end = time.perf_counter()
            if len(marks) == 2:
                TIMES["before the body (INTENT)"].append(marks[0] - start)
                TIMES["after the body (outcome)"].append(end - marks[1])
                TIMES["run_call, all"].append(end - start)

    saga_module.Saga.run_call = timed  # type: ignore[method-assign]


async def main(uri: str, rounds: int, rule: str) -> None:
    set_tracing_disabled(True)
    _instrument()
    async with scratch_schema(uri) as scoped:
        options = {"durable": {"durable_outcomes": True}, "fast": {"fast_outcomes": True}}.get(rule, {})
        sagacity = Sagacity(PostgresJournal(scoped, **options))
        pairs = []
        for round_no in range(rounds + 1):  # round 0 warms up
            if round_no == 1:
                TIMES.clear()
            start = time.perf_counter()
            await Runner.run(_agent(_bare_tool(), 20), "go", max_turns=30)
            bare = time.perf_counter() - start
            start = time.perf_counter()
            await sagacity.run(_agent(_wrapped_tool(), 20), "go", max_turns=30)
            if round_no:
                pairs.append(time.perf_counter() - start - bare)
        await sagacity.aclose()
    overhead = statistics.median(pairs) / 20
    inside = statistics.median(TIMES["run_call, all"])
    print(f"{rule} commit rule: overhead {overhead * 1e3:.3f} ms per call (median of {rounds})")
    for name, values in TIMES.items():
        print(f"  {name:26s} {statistics.median(values) * 1e3:.3f} ms")
    print(f"  outside run_call           {(overhead - inside) * 1e3:.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--rounds", type=int, default=30)
    rule = parser.add_mutually_exclusive_group()
    rule.add_argument("--durable", action="store_true", help="durable_outcomes=True (every outcome durable)")
    rule.add_argument("--fast", action="store_true", help="fast_outcomes=True (outcomes written behind)")
    options = parser.parse_args()
    asyncio.run(main(options.db, options.rounds,
                     "durable" if options.durable else "fast" if options.fast else "default"))

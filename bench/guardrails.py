"""What the saga guardrails cost on a healthy run.

The same scripted agent run (``ScriptedModel``, tracing off: N compensatable tool calls, one per
model turn, then a final message) through ``Sagacity.run``, interleaved round by round in an order drawn afresh each
round (``fair_order``), warm-up rounds discarded, on each journal:

    plain        the agent as is, FailurePolicy.STOP
    output       the agent with ``saga_output_guardrail()`` (one journal read per final output)
    tool         every tool carrying ``saga_tool_guardrail()`` (an in-memory check per call)
    refuse       FailurePolicy.REFUSE_EFFECTS (one list check per call in the wrapper)

"Paired" is the median over rounds of (variant - plain of the same round). On a loaded machine
the paired figures are within noise; the direct figure isolates what the output guardrail adds:
the median time of one ``read_verdict`` (the journal read it makes) on a saga of N calls.

Usage::

    python bench/guardrails.py [--calls 20] [--rounds N] [--warmup W] [--seed S] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import FailurePolicy, Sagacity, SagaStatus, compensable
from sagacity_agents.backends import InMemoryJournal, SqliteJournal
from sagacity_agents.guardrails import saga_output_guardrail, saga_tool_guardrail
from sagacity_agents.saga import Saga
from sagacity_agents.core.saga.verdict import read_verdict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fair_order import round_orders  # noqa: E402

VARIANTS = ("plain", "output", "tool", "refuse")


@function_tool
@compensable(undo=lambda ctx: None)
async def reserve(n: int) -> str:
    """Reserve item n."""
    return f"reserved {n}"


def _agent(variant: str, calls: int) -> Agent[Any]:
    model = ScriptedModel(
        [[function_call("reserve", {"n": i}, call_id=f"c{i}")] for i in range(calls)]
        + [[assistant_message("done")]]
    )
    tool = reserve
    if variant == "tool":
        tool = copy.copy(reserve)
        tool.tool_input_guardrails = [saga_tool_guardrail()]
    guards = [saga_output_guardrail()] if variant == "output" else []
    return Agent(name="bench", model=model, tools=[tool], output_guardrails=guards)


async def _one(sagacity: dict[str, Sagacity], variant: str, calls: int) -> float:
    agent = _agent(variant, calls)
    started = time.perf_counter()
    result = await sagacity[variant].run(agent, "go", max_turns=calls + 2)
    elapsed = time.perf_counter() - started
    if result.status is not SagaStatus.COMPLETED:
        raise RuntimeError(f"{variant}: {result.status} {result.exception!r}")
    return elapsed


async def _read_verdict_median(journal: Any, n: int) -> float:
    """Median seconds of one read_verdict on the journal's last saga."""
    saga = Saga(journal, (await journal.saga_ids())[-1])
    samples = []
    for _ in range(max(n, 1)):
        started = time.perf_counter()
        await read_verdict(saga)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def run_benchmark(
    *, calls: int = 20, rounds: int = 100, warmup: int = 10, db_dir: Path | None = None, seed: int = 1
) -> dict[str, Any]:
    """Run every variant on each journal, in a fresh order each round (``seed``); return
    per-variant medians and paired differences (seconds), and the orders (``"orders"``: journal
    -> one list per round, warm-up included)."""
    set_tracing_disabled(True)
    out: dict[str, Any] = {"calls": calls, "rounds": rounds, "journals": {}, "orders": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(db_dir or tmp)
        for journal_kind in ("memory", "sqlite-full"):
            journal = InMemoryJournal() if journal_kind == "memory" else SqliteJournal(base / "g.db")
            sagacity = {
                v: Sagacity(journal, policy=FailurePolicy.REFUSE_EFFECTS if v == "refuse" else FailurePolicy.STOP)
                for v in VARIANTS
            }
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            orders = out["orders"][journal_kind] = round_orders(VARIANTS, warmup + rounds, seed)
            for round_no, order in enumerate(orders):
                for variant in order:
                    elapsed = await _one(sagacity, variant, calls)
                    if round_no >= warmup:
                        times[variant].append(elapsed)
            out["journals"].setdefault(journal_kind, {})
            out["read_verdict_s"] = out.get("read_verdict_s", {})
            out["read_verdict_s"][journal_kind] = await _read_verdict_median(journal, rounds)
            await journal.close()
            plain = times["plain"]
            out["journals"][journal_kind] |= {
                v: {
                    "median_run_s": statistics.median(times[v]),
                    "paired_added_s": statistics.median(t - p for t, p in zip(times[v], plain, strict=True)),
                }
                for v in VARIANTS
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1, help="seed of the per-round orders")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = asyncio.run(run_benchmark(calls=args.calls, rounds=args.rounds, warmup=args.warmup,
                                       seed=args.seed))
    print(f"{args.calls} tool calls per run, {args.rounds} rounds")
    print(f"{'journal':12} {'variant':8} {'median run':>12} {'paired added':>14}")
    for journal_kind, variants in result["journals"].items():
        for variant, row in variants.items():
            print(f"{journal_kind:12} {variant:8} {row['median_run_s'] * 1e3:10.2f} ms "
                  f"{row['paired_added_s'] * 1e6:+11.0f} µs")
    for journal_kind, seconds in result["read_verdict_s"].items():
        print(f"read_verdict ({args.calls} calls, {journal_kind}): {seconds * 1e6:.0f} µs")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

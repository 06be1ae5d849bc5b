"""What the fallback seams cost per tool call, next to a decorated tool and a bare one.

One scripted run (``agents.testing.ScriptedModel``, tracing off) of N calls, one per model turn,
timed in four variants interleaved round by round (in an order drawn afresh each round,
``fair_order``), warm-up rounds discarded, in-memory journal:

    bare        plain ``@function_tool``, plain ``Runner.run``
    decorated   ``@compensable(undo=...)`` under ``@function_tool``, ``Sagacity.run``
    protected   ``protect_tool(function_tool(f), reversibility="compensatable", undo=...)``:
                INTENT from our input guardrail, EXECUTED from our output guardrail
    nested      ``nested_agent_tool(inner.as_tool(...))`` whose inner agent makes one decorated
                call (two journaled calls and a nested run per outer call)

Per-call figure: (median run time of the variant - median of bare) / N.

Usage::

    python bench/fallback.py [--calls 20] [--rounds 30] [--warmup 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, compensable, nested_agent_tool, protect_tool
from sagacity_agents.backends import InMemoryJournal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fair_order import round_orders  # noqa: E402

VARIANTS = ("bare", "decorated", "protected", "nested")


def _model(name: str, calls: int, prefix: str) -> ScriptedModel:
    model = ScriptedModel()
    for i in range(calls):
        model.enqueue([function_call(name, {"x": i} if name != "helper" else {"input": "go"},
                                     call_id=f"{prefix}{i}")])
    model.enqueue([assistant_message("done")])
    return model


def _undo(ctx: Any) -> None:
    return None


def build(variant: str, calls: int) -> Agent[Any]:
    """A fresh agent of ``variant`` scripted for ``calls`` calls."""
    if variant == "nested":
        inner_model = ScriptedModel()
        for i in range(calls):
            inner_model.enqueue([function_call("step", {"x": i}, call_id=f"in{i}")])
            inner_model.enqueue([assistant_message("ok")])

        @function_tool
        @compensable(undo=_undo)
        def step(x: int) -> int:
            return x

        inner = Agent(name="inner", model=inner_model, tools=[step])
        helper = nested_agent_tool(inner.as_tool(tool_name="helper", tool_description="h"))
        return Agent(name="outer", model=_model("helper", calls, "out"), tools=[helper])

    def step_plain(x: int) -> int:
        return x

    if variant == "decorated":
        tool = function_tool(compensable(undo=_undo)(step_plain), name_override="step")
    else:
        tool = function_tool(step_plain, name_override="step")
        if variant == "protected":
            tool = protect_tool(tool, reversibility="compensatable", undo=_undo)
    return Agent(name="a", model=_model("step", calls, "c"), tools=[tool])


async def once(variant: str, calls: int, sagacity: Sagacity) -> float:
    agent = build(variant, calls)
    started = time.perf_counter()
    if variant == "bare":
        await Runner.run(agent, "go", max_turns=calls + 5)
    else:
        result = await sagacity.run(agent, "go", max_turns=calls + 5)
        assert result.status.value == "COMPLETED", result
    return time.perf_counter() - started


async def run_benchmark(calls: int, rounds: int, warmup: int, seed: int = 1) -> dict[str, Any]:
    """Time every variant in every round, in a fresh order each round; warm-up rounds dropped.

    Returns:
        ``{"times": variant -> run seconds per kept round, "orders": the order of every round}``.
    """
    set_tracing_disabled(True)
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    sagacity = Sagacity(InMemoryJournal())
    orders = round_orders(VARIANTS, warmup + rounds, seed)
    for r, order in enumerate(orders):
        for v in order:
            elapsed = await once(v, calls, sagacity)
            if r >= warmup:
                times[v].append(elapsed)
    return {"times": times, "orders": orders}


async def main(calls: int, rounds: int, warmup: int, seed: int = 1) -> None:
    times = (await run_benchmark(calls, rounds, warmup, seed))["times"]
    bare = statistics.median(times["bare"])
    print(f"{calls} calls per run, {rounds} rounds, in-memory journal")
    for v in VARIANTS:
        med = statistics.median(times[v])
        extra = "" if v == "bare" else f"  (+{(med - bare) / calls * 1e6:.0f} us per call)"
        print(f"  {v:10s} median run {med * 1e3:8.2f} ms{extra}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1, help="seed of the per-round orders")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds, args.warmup, args.seed))

"""What issue 23's spans and trace ids add to each journaled call (the hook path).

Three figures, per call, in one process:

    added, tracing off   the code issue 23 put on a call's path (the call step's begin / note /
                         end, and the trace-link lookup of its two entries, INTENT and outcome),
                         with the Agents SDK's tracing disabled (``set_tracing_disabled(True)``)
                         and no OpenTelemetry: the budget is 2 µs
    added, OTel metrics  the same with ``sagacity_agents.otel.instrument()`` (metrics into an
                         in-memory reader, no SDK trace): the counters of every call
    added, tracing on    the same inside an SDK trace (a custom span per call, made current,
                         its data filled, finished into a no-op processor; the arguments hashed
                         for ``sagacity.args.hash``; the ids read for both entries)
    run_call, A/B        ``Saga.run_call`` end to end on an in-memory journal, interleaved
                         batches: core alone (no observer, no id source) / SDK layer with
                         tracing off / tracing on. The journal's own work dominates; the
                         difference of the first two is within noise, which is the point

Usage::

    python bench/observe_overhead.py [--n 200000] [--calls 2000] [--rounds 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from typing import Any

from agents import set_trace_processors, set_tracing_disabled
from agents.tracing import TracingProcessor, trace

import sagacity_agents.sdk  # noqa: F401 - installs the SDK layer's observer and id source
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.saga import Saga
from sagacity_agents.core import observe
from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
from sagacity_agents.core.saga.observed import begin_call, end_call, note_intent
from sagacity_agents.sdk import tracing as sdk_tracing


class NoOp(TracingProcessor):
    """A processor that keeps nothing (an exporter's cost is the exporter's)."""

    def on_trace_start(self, trace: Any) -> None: ...
    def on_trace_end(self, trace: Any) -> None: ...
    def on_span_start(self, span: Any) -> None: ...
    def on_span_end(self, span: Any) -> None: ...
    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...


DECL = ToolDeclaration(name="reserve", reversibility=Reversibility.COMPENSATABLE, undo=lambda ctx: None,
                       declaration_id="bench:reserve")
ARGS = {"item": "seat 12A", "qty": 1}


class _Intent:
    seq = 3
    payload = {"args": ARGS, "reversibility": "compensatable"}


PASSES = 40


def added_per_call(n: int) -> float:
    """Seconds per call of the added path (see the module notes), the fastest of
    :data:`PASSES` passes of ``n`` calls (the machine's other load only ever adds to a pass)."""
    intent = _Intent()
    payload = {"intent_seq": 3, "result": "ok"}
    samples = []
    for _ in range(PASSES):
        started = time.perf_counter()
        for _ in range(n):
            step = begin_call("saga-1", DECL, "reserve", "call-1", ARGS, "agent")
            observe.trace_link()  # the INTENT's AppendRequest.build
            note_intent(step, intent)  # type: ignore[arg-type]
            observe.trace_link()  # the outcome's
            end_call(step, Phase.EXECUTED, payload, None)
        samples.append((time.perf_counter() - started) / n)
    return min(samples)


def _otel_installed() -> bool:
    try:
        import opentelemetry.sdk.metrics  # noqa: F401
    except ImportError:
        return False
    return True


def _with_otel_metrics(n: int) -> float:
    """:func:`added_per_call` with ``sagacity_agents.otel.instrument()`` into an in-memory
    metric reader (tracing off): what a worker that exports metrics pays per call."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from sagacity_agents.otel import instrument, uninstrument

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    instrument(meter_provider=provider)
    try:
        return added_per_call(n)
    finally:
        uninstrument()
        provider.shutdown()


def baseline_loop(n: int) -> float:
    """The same loop with nothing in it (subtracted: the loop's own cost)."""
    samples = []
    for _ in range(PASSES):
        started = time.perf_counter()
        for _ in range(n):
            pass
        samples.append((time.perf_counter() - started) / n)
    return min(samples)


async def run_calls(calls: int) -> float:
    """Seconds per ``Saga.run_call`` on an in-memory journal (``calls`` calls, one saga)."""
    saga = Saga(InMemoryJournal())
    await saga.begin_run("bench")

    async def body() -> str:
        return "ok"

    started = time.perf_counter()
    for i in range(calls):
        await saga.run_call(DECL, "reserve", f"c{i}", ARGS, body)
    return (time.perf_counter() - started) / calls


def _core_alone() -> tuple[list[Any], list[Any]]:
    saved = (list(observe._observers), list(observe._link_sources))
    observe._observers.clear()
    observe._link_sources.clear()
    return saved


def _restore(saved: tuple[list[Any], list[Any]]) -> None:
    observe._observers[:] = saved[0]
    observe._link_sources[:] = saved[1]


async def ab(calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """Seconds per call for each variant (median and fastest round), interleaved round by round."""
    results: dict[str, list[float]] = {"core alone": [], "tracing off": [], "tracing on": []}
    await run_calls(200)  # warm-up
    for _ in range(rounds):
        saved = _core_alone()
        set_tracing_disabled(True)
        results["core alone"].append(await run_calls(calls))
        _restore(saved)
        results["tracing off"].append(await run_calls(calls))
        set_tracing_disabled(False)
        with trace("bench"):
            results["tracing on"].append(await run_calls(calls))
        set_tracing_disabled(True)
    return {k: {"median": statistics.median(v), "min": min(v)} for k, v in results.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="calls per pass of the added path")
    parser.add_argument("--calls", type=int, default=2000, help="calls per run_call batch")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved A/B rounds")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)
    set_trace_processors([NoOp()])

    set_tracing_disabled(True)
    loop = baseline_loop(args.n)
    off = added_per_call(args.n) - loop
    set_tracing_disabled(False)
    token = sdk_tracing.sensitive_allowed.set(False)
    with trace("bench"):
        on = added_per_call(max(args.n // 10, 1000)) - loop
    sdk_tracing.sensitive_allowed.reset(token)
    set_tracing_disabled(True)
    otel = _with_otel_metrics(args.n) - loop if _otel_installed() else None
    per_call = asyncio.run(ab(args.calls, args.rounds))
    result = {
        "python": sys.version.split()[0], "machine": platform.machine(),
        "added_tracing_off_us": round(off * 1e6, 3),
        "added_tracing_on_us": round(on * 1e6, 2),
        "budget_us": 2.0,
        "added_otel_metrics_us": round(otel * 1e6, 2) if otel is not None else None,
        "run_call_us": {k: {m: round(x * 1e6, 2) for m, x in v.items()} for k, v in per_call.items()},
    }
    print(f"added per call, tracing off, no OTel : {result['added_tracing_off_us']:8.3f} µs  (budget 2 µs)")
    print(f"added per call, tracing on           : {result['added_tracing_on_us']:8.2f} µs  (span + ids + args hash)")
    if otel is not None:
        print(f"added per call, OTel metrics, no SDK trace: {result['added_otel_metrics_us']:6.2f} µs  "
              "(instrument(): counters, the step's attributes and args hash)")
    for name, value in result["run_call_us"].items():
        print(f"Saga.run_call, in-memory, {name:11s}: {value['median']:8.2f} µs per call "
              f"(median; fastest round {value['min']:.2f})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()

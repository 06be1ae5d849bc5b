"""Overhead of sagacity-agents on a scripted OpenAI Agents SDK run.

The same scripted agent run (``agents.testing.ScriptedModel``, tracing off: N tool calls, one per
model turn, then a final assistant message) is timed in four variants, in one process,
interleaved round by round (A B C D, A B C D, ...), warm-up rounds discarded:

    bare          plain ``@function_tool`` tools, plain ``Runner.run``
    memory        the same tools under ``@compensable(undo=...)``, ``Sagacity(InMemoryJournal())``
    sqlite-full   the same, ``Sagacity(SqliteJournal(file))`` (``synchronous=FULL``, the default)
    sqlite-normal the same, ``SqliteJournal(file, synchronous="NORMAL")``

Wrapped runs go through ``Sagacity.run``, so the saga's own entries (SAGA_OPENED, RUN_STARTED,
RUN_ENDED, SAGA_CLOSED, the lease read at start and the reads at open / close) are part of the
measured cost. A second, shorter
interleaved series with zero tool calls isolates that fixed per-run cost.

It also measures the journal append directly (median per append, one saga), for each backend,
and a raw ``sqlite3`` INSERT+COMMIT with the same pragmas: each wrapped call is two appends
(INTENT before the body, EXECUTED after), of which only the INTENT waits for the disk (the
outcome's commit is covered by the next durable one: docs/architecture.md, "One durable commit
per call"), so on SQLite the per-call figure is bounded below by one durable commit.

Usage::

    python bench/overhead.py [--calls 20] [--rounds N] [--warmup W] [--json out.json]
    python bench/overhead.py --durable [--rounds 30]   # bench/durable_cost.py: beyond one commit
    python bench/overhead.py --sensitive [--rounds 60] # bench/sensitive_cost.py (issue 36)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal

VARIANTS = ("bare", "memory", "sqlite-full", "sqlite-normal")
TOOL_NAME = "reserve"


# --- the tools ---------------------------------------------------------------------------------
def _bare_tool() -> Any:
    @function_tool
    async def reserve(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        return f"R-{item}-{qty}"

    return reserve


def _undo_reserve(ctx: Any) -> None:  # never called: the runs succeed
    pass


def _wrapped_tool() -> Any:
    @function_tool
    @compensable(undo=_undo_reserve)
    async def reserve(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        return f"R-{item}-{qty}"

    return reserve


def _agent(tool: Any, calls: int) -> Agent[Any]:
    model = ScriptedModel()
    for i in range(calls):
        model.enqueue([function_call(TOOL_NAME, {"item": f"item-{i}", "qty": i + 1}, call_id=f"call_{i}")])
    model.enqueue([assistant_message("done")])
    return Agent(name="bench", model=model, tools=[tool])


# --- statistics --------------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float:
    """Percentile with linear interpolation (q in 0..100)."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p90": _pct(values, 90),
        "min": min(values),
        "mean": statistics.fmean(values),
    }


# --- the interleaved run series -----------------------------------------------------------------
class _Runners:
    """One runner per variant; journals (and their files) live for the whole series, as they would
    in a real process."""

    def __init__(self, db_dir: Path, variants: tuple[str, ...] = VARIANTS) -> None:
        self.bare_tool = _bare_tool()
        self.wrapped_tool = _wrapped_tool()
        makers: dict[str, Callable[[], Sagacity]] = {
            "memory": lambda: Sagacity(InMemoryJournal()),
            "sqlite-full": lambda: Sagacity(SqliteJournal(db_dir / "bench-full.db")),
            "sqlite-normal": lambda: Sagacity(
                SqliteJournal(db_dir / "bench-normal.db", synchronous="NORMAL")
            ),
        }
        self.sagacities = {v: makers[v]() for v in variants if v != "bare"}

    async def run_once(self, variant: str, calls: int) -> float:
        """Build a fresh scripted agent (untimed), then time one run (seconds)."""
        if variant == "bare":
            agent = _agent(self.bare_tool, calls)
            start = time.perf_counter()
            result = await Runner.run(agent, "go", max_turns=calls + 5)
            elapsed = time.perf_counter() - start
            if result.final_output != "done":
                raise RuntimeError(f"bare run ended unexpectedly: {result.final_output!r}")
            return elapsed
        sagacity = self.sagacities[variant]
        agent = _agent(self.wrapped_tool, calls)
        start = time.perf_counter()
        saga = await sagacity.run(agent, "go", max_turns=calls + 5)
        elapsed = time.perf_counter() - start
        if saga.status is not SagaStatus.COMPLETED or saga.final_output != "done":
            raise RuntimeError(f"{variant} run ended {saga.status}: {saga.exception!r}")
        return elapsed

    async def check_journal(self, calls: int) -> dict[str, int]:
        """Entries per saga in each journal (sanity: 4 saga entries + 2 per call)."""
        counts = {}
        for name, sagacity in self.sagacities.items():
            ids = await sagacity.journal.saga_ids()
            entries = await sagacity.journal.entries(ids[-1])
            tool_entries = [e for e in entries if e.phase in (Phase.INTENT, Phase.EXECUTED)]
            if len(tool_entries) != 2 * calls:
                raise RuntimeError(f"{name}: {len(tool_entries)} tool entries, expected {2 * calls}")
            counts[name] = len(entries)
        return counts

    async def aclose(self) -> None:
        for sagacity in self.sagacities.values():
            await sagacity.aclose()


async def _series(
    runners: _Runners, variants: tuple[str, ...], calls: int, rounds: int, warmup: int,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {v: [] for v in variants}
    # A full collection walks every object the SDK and pydantic imported (~0.1 s here); frozen,
    # the untimed collection before each run only walks what earlier runs left behind.
    gc.collect()
    gc.freeze()
    for r in range(warmup + rounds):
        for variant in variants:
            gc.collect()
            elapsed = await runners.run_once(variant, calls)
            if r >= warmup:
                times[variant].append(elapsed)
        if progress is not None:
            progress(r + 1, warmup + rounds)
    return times


def _analyse(times: dict[str, list[float]], calls: int) -> dict[str, Any]:
    bare = times["bare"]
    bare_med = statistics.median(bare)
    per = max(calls, 1)
    out: dict[str, Any] = {}
    for variant, t in times.items():
        s = _summary(t)
        paired = [a - b for a, b in zip(t, bare, strict=True)]
        added_med = s["median"] - bare_med
        out[variant] = {
            "run_s": s,
            "per_turn_us": s["median"] / per * 1e6,
            "added_per_call_us": added_med / per * 1e6,
            "added_per_call_us_paired": statistics.median(paired) / per * 1e6,
            "overhead_pct": added_med / bare_med * 100.0,
            "overhead_pct_paired": statistics.median(paired) / bare_med * 100.0,
        }
    return out


# --- direct append cost ------------------------------------------------------------------------
async def _append_cost(journal: Any, n: int) -> dict[str, float]:
    saga_id = f"append-bench-{time.time_ns()}"
    payload = {"args": {"item": "item-1", "qty": 1}, "reversibility": "COMPENSATABLE"}
    await journal.append(saga_id, Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
    samples = []
    for i in range(n):
        start = time.perf_counter()
        await journal.append(
            saga_id, Phase.INTENT, write_key=f"inv{i}:intent", tool=TOOL_NAME, call_id=f"c{i}",
            payload=payload,
        )
        samples.append(time.perf_counter() - start)
    s = _summary(samples)
    return {"median_us": s["median"] * 1e6, "p90_us": s["p90"] * 1e6, "n": n}


def _raw_sqlite_commit(path: Path, synchronous: str, n: int) -> dict[str, float]:
    """INSERT + COMMIT of a ~300-byte row, WAL mode, on this thread: the storage floor."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT)")
        body = "x" * 300
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (body) VALUES (?)", (body,))
            conn.execute("COMMIT")
            samples.append(time.perf_counter() - start)
    finally:
        conn.close()
    s = _summary(samples)
    return {"median_us": s["median"] * 1e6, "p90_us": s["p90"] * 1e6, "n": n}


async def measure_appends(db_dir: Path, n: int) -> dict[str, Any]:
    """Median cost of one journal append per backend, and of a raw SQLite commit."""
    out: dict[str, Any] = {}
    mem = InMemoryJournal()
    out["memory"] = await _append_cost(mem, n)
    for label, sync in (("sqlite-full", "FULL"), ("sqlite-normal", "NORMAL")):
        journal = SqliteJournal(db_dir / f"append-{sync.lower()}.db", synchronous=sync)
        try:
            out[label] = await _append_cost(journal, n)
        finally:
            await journal.close()
        out[f"raw-{label}"] = _raw_sqlite_commit(db_dir / f"raw-{sync.lower()}.db", sync, n)
    return out


# --- the whole benchmark -----------------------------------------------------------------------
def machine_facts(db_dir: Path | None = None) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
    }
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("openai-agents", "sagacity-agents"):
        try:
            facts[dist.replace("-", "_")] = version(dist)
        except PackageNotFoundError:
            facts[dist.replace("-", "_")] = "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    facts["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            facts["loadavg"] = " ".join(f.read().split()[:3])
    except OSError:
        pass
    if db_dir is not None:
        facts["db_dir"] = str(db_dir)
        try:
            best = ""
            with open("/proc/mounts", encoding="utf-8") as f:
                for line in f:
                    dev, mnt, fstype = line.split()[:3]
                    if str(db_dir.resolve()).startswith(mnt) and len(mnt) >= len(best):
                        best, facts["db_fs"] = mnt, f"{fstype} ({dev} on {mnt})"
        except OSError:
            pass
    return facts


async def run_benchmark(
    calls: int = 20,
    rounds: int = 150,
    warmup: int = 10,
    fixed_rounds: int | None = None,
    append_n: int = 2000,
    db_dir: str | Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    variants: tuple[str, ...] | list[str] = VARIANTS,
) -> dict[str, Any]:
    """Run the whole benchmark and return its results as a JSON-able dict.

    Args:
        calls: tool calls per run (one per model turn; then a final assistant message).
        rounds: measured rounds; each round runs every variant once, in turn.
        warmup: rounds run first and discarded.
        fixed_rounds: rounds of the zero-call series (fixed per-run saga cost); default rounds//2,
            0 to skip.
        append_n: appends timed per backend for the direct append cost (0 to skip).
        db_dir: where the SQLite files go (a temporary directory under it); default: system temp.
        progress: ``(phase, done, total)`` callback.
        variants: which of :data:`VARIANTS` to run ("bare" is always run first in each round).
    """
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    variants = tuple(v for v in VARIANTS if v == "bare" or v in variants)
    set_tracing_disabled(True)
    if fixed_rounds is None:
        fixed_rounds = max(rounds // 2, 1)
    with tempfile.TemporaryDirectory(prefix="sagacity-bench-", dir=db_dir) as tmp:
        tmp_path = Path(tmp)
        result: dict[str, Any] = {
            "machine": machine_facts(tmp_path),
            "params": {"calls": calls, "rounds": rounds, "warmup": warmup,
                       "fixed_rounds": fixed_rounds, "append_n": append_n,
                       "order": list(variants), "gc": "gc.freeze() after setup; gc.collect() before each run, untimed"},
        }
        runners = _Runners(tmp_path, variants)
        try:
            started = time.perf_counter()
            cb = (lambda d, t: progress("runs", d, t)) if progress else None
            times = await _series(runners, variants, calls, rounds, warmup, cb)
            result["journal_entries_last_saga"] = await runners.check_journal(calls)
            result["runs"] = _analyse(times, calls)
            result["raw_times_s"] = times
            if fixed_rounds:
                cb = (lambda d, t: progress("zero-call runs", d, t)) if progress else None
                fixed = await _series(runners, variants, 0, fixed_rounds, max(warmup // 2, 1), cb)
                bare0 = statistics.median(fixed["bare"])
                result["fixed_per_run"] = {
                    v: {
                        "run_s": _summary(fixed[v]),
                        "added_us": (statistics.median(fixed[v]) - bare0) * 1e6,
                        "added_us_paired": statistics.median(
                            [a - b for a, b in zip(fixed[v], fixed["bare"], strict=True)]
                        ) * 1e6,
                    }
                    for v in variants
                }
                if calls:
                    for v in variants[1:]:
                        total_added = result["runs"][v]["added_per_call_us"] * calls
                        marginal = (total_added - result["fixed_per_run"][v]["added_us"]) / calls
                        result["runs"][v]["marginal_per_call_us"] = marginal
                        bare_turn = result["runs"]["bare"]["per_turn_us"]
                        result["runs"][v]["marginal_pct"] = marginal / bare_turn * 100.0
            result["series_seconds"] = time.perf_counter() - started
            result["machine"]["loadavg_after_runs"] = machine_facts().get("loadavg")
        finally:
            gc.unfreeze()
            await runners.aclose()
        if append_n:
            if progress:
                progress("appends", 0, 1)
            result["appends"] = await measure_appends(tmp_path, append_n)
    return result


# --- output --------------------------------------------------------------------------------------
_LABELS = {
    "bare": "bare (Runner.run)",
    "memory": "in-memory (Sagacity.run)",
    "sqlite-full": "SQLite FULL (Sagacity.run)",
    "sqlite-normal": "SQLite NORMAL (Sagacity.run)",
}


def print_report(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    m = result["machine"]
    p = result["params"]
    calls = p["calls"]
    console.print(
        f"[bold]Machine[/]: Python {m['python']} ({m['implementation']}), {m['cpu_count']} CPUs"
        f" ({m.get('cpu', '?')}), SQLite {m['sqlite']}, openai-agents {m.get('openai_agents', '?')},"
        f" {m['platform']}"
    )
    console.print(
        f"SQLite files on: {m.get('db_fs', '?')}; load average before/after the runs: "
        f"{m.get('loadavg', '?')} / {m.get('loadavg_after_runs', '?')}"
    )
    console.print(
        f"Run: {calls} tool calls (one per model turn) + 1 final message; {p['rounds']} rounds"
        f" measured after {p['warmup']} warm-up rounds, variants interleaved {'/'.join(p['order'])}"
        f" each round; {result.get('series_seconds', 0):.1f} s of runs"
    )

    order = [v for v in p["order"] if v in result["runs"]]
    table = Table(title=f"Run time, {calls}-call scripted run (time.perf_counter)")
    table.add_column("variant")
    table.add_column("median run ms", justify="right")
    table.add_column("p90 run ms", justify="right")
    table.add_column(f"per turn µs (run/{calls})", justify="right")
    table.add_column("added µs/call (Δ medians)", justify="right")
    table.add_column("added µs/call (paired)", justify="right")
    table.add_column("overhead / turn (Δ medians)", justify="right")
    table.add_column("overhead / turn (paired)", justify="right")
    for v in order:
        r = result["runs"][v]
        is_bare = v == "bare"
        table.add_row(
            _LABELS[v],
            f"{r['run_s']['median'] * 1e3:.2f}",
            f"{r['run_s']['p90'] * 1e3:.2f}",
            f"{r['per_turn_us']:.0f}",
            "—" if is_bare else f"{r['added_per_call_us']:+.0f}",
            "—" if is_bare else f"{r['added_per_call_us_paired']:+.0f}",
            "—" if is_bare else f"{r['overhead_pct']:+.1f} %",
            "—" if is_bare else f"{r['overhead_pct_paired']:+.1f} %",
        )
    console.print(table)
    console.print(
        "[dim]paired = median over rounds of (variant run - bare run of the same round), robust to"
        " drift and to load from other processes; Δ medians = median(variant) - median(bare).[/]"
    )

    if "fixed_per_run" in result:
        t2 = Table(title="Fixed per-run saga cost (zero-call runs: open + RUN_STARTED + close)")
        t2.add_column("variant")
        t2.add_column("median run ms", justify="right")
        t2.add_column("added µs/run", justify="right")
        t2.add_column("added µs/run (paired)", justify="right")
        t2.add_column(f"= µs per call over {calls} calls", justify="right")
        t2.add_column(f"marginal µs/call ({calls}-call Δ minus fixed)", justify="right")
        for v in order:
            f = result["fixed_per_run"][v]
            r = result["runs"][v]
            is_bare = v == "bare"
            t2.add_row(
                _LABELS[v],
                f"{f['run_s']['median'] * 1e3:.2f}",
                "—" if is_bare else f"{f['added_us']:+.0f}",
                "—" if is_bare else f"{f['added_us_paired']:+.0f}",
                "—" if is_bare or not calls else f"{f['added_us_paired'] / calls:+.0f}",
                "—" if is_bare or "marginal_per_call_us" not in r else f"{r['marginal_per_call_us']:+.0f}",
            )
        console.print(t2)

    if "appends" in result:
        a = result["appends"]
        t3 = Table(title=f"One journal append, measured directly ({a['memory']['n']} appends each)")
        t3.add_column("what")
        t3.add_column("median µs", justify="right")
        t3.add_column("p90 µs", justify="right")
        t3.add_column("x2 per call (INTENT+EXECUTED) µs", justify="right")
        rows = [
            ("InMemoryJournal.append", "memory"),
            ("SqliteJournal.append, FULL", "sqlite-full"),
            ("SqliteJournal.append, NORMAL", "sqlite-normal"),
            ("raw sqlite3 INSERT+COMMIT, FULL (same thread)", "raw-sqlite-full"),
            ("raw sqlite3 INSERT+COMMIT, NORMAL (same thread)", "raw-sqlite-normal"),
        ]
        for label, key in rows:
            x = a[key]
            t3.add_row(label, f"{x['median_us']:.1f}", f"{x['p90_us']:.1f}", f"{2 * x['median_us']:.0f}")
        console.print(t3)

    runs = result["runs"]
    if "memory" in runs:
        mem = runs["memory"]
        verdict = "meets" if mem["overhead_pct_paired"] <= 5.0 else "EXCEEDS"
        console.print(
            f"In-memory journal: {mem['overhead_pct_paired']:+.1f} % per tool-call turn, paired"
            f" ({mem['added_per_call_us_paired']:+.0f} µs/call; Δ medians {mem['overhead_pct']:+.1f} %)"
            f" -> {verdict} the 5 % target."
        )
    for v, key in (("sqlite-full", "FULL"), ("sqlite-normal", "NORMAL")):
        if v not in runs:
            continue
        line = (
            f"SQLite {key}: {runs[v]['overhead_pct_paired']:+.1f} % per turn, paired"
            f" ({runs[v]['added_per_call_us_paired']:+.0f} µs/call)"
        )
        if "appends" in result:
            a = result["appends"]
            line += (
                f"; 2 durable appends per call = 2 x {a[v]['median_us']:.0f} µs"
                f" (of which the raw INSERT+COMMIT floor is 2 x {a['raw-' + v]['median_us']:.0f} µs)"
            )
        console.print(line + ".")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="tool calls per run (default 20)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="measured rounds, each runs all 4 variants (default 150, ~40 s; with --durable 30,"
                        " the least the durable measure is decided on)")
    parser.add_argument("--warmup", type=int, default=10, help="discarded warm-up rounds (default 10)")
    parser.add_argument("--fixed-rounds", type=int, default=None,
                        help="rounds of the zero-call series (default rounds/2; 0 skips it)")
    parser.add_argument("--append-n", type=int, default=2000,
                        help="appends timed per backend for the direct cost (default 2000; 0 skips)")
    parser.add_argument("--db-dir", default=None, help="directory for the SQLite files (default: temp)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated subset of {','.join(VARIANTS)} (bare always runs)")
    parser.add_argument("--json", dest="json_out", default=None, help="write the results here")
    parser.add_argument("--durable", action="store_true",
                        help="only the durable section (bench/durable_cost.py): the time a call adds beyond "
                        "its one durable commit on SQLite FULL and PostgreSQL, in memory per turn, one-call "
                        "runs, agent-saga beside when installed; medians over rounds, 95 %% intervals")
    parser.add_argument("--sensitive", action="store_true",
                        help="only the protection section (bench/sensitive_cost.py): per-call cost of "
                        "committing and sealing sensitive values in memory, defaults on with no "
                        "sensitive value (target 10 µs) and one sensitive argument with a master key "
                        "(target 100 µs), and SagaSecrets.protect alone")
    args = parser.parse_args(argv)
    if args.sensitive:
        sys.path.insert(0, str(Path(__file__).parent))
        from sensitive_cost import main as sensitive_main

        sensitive = sensitive_main(calls=args.calls, rounds=min(args.rounds or 60, 60),
                                   warmup=args.warmup)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(sensitive, indent=2), encoding="utf-8")
        return 0
    if args.durable:
        sys.path.insert(0, str(Path(__file__).parent))
        from durable_cost import print_durable, run_durable

        rounds = 30 if args.rounds is None else args.rounds
        if rounds < 30:
            print(f"note: {rounds} rounds is below the 30 the durable measure is decided on", file=sys.stderr)
        durable = asyncio.run(run_durable(calls=args.calls, rounds=rounds, warmup=min(args.warmup, 3)))
        print_durable(durable)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(durable, indent=2), encoding="utf-8")
        return 0

    from rich.console import Console

    console = Console(stderr=True)
    last = {"t": 0.0}

    def progress(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last["t"] > 5:
            last["t"] = now
            console.print(f"[dim]{phase}: {done}/{total}[/]")

    result = asyncio.run(
        run_benchmark(
            calls=args.calls, rounds=150 if args.rounds is None else args.rounds, warmup=args.warmup,
            fixed_rounds=args.fixed_rounds, append_n=args.append_n, db_dir=args.db_dir,
            progress=progress, variants=[v.strip() for v in args.variants.split(",") if v.strip()],
        )
    )
    print_report(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

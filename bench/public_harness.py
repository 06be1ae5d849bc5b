"""A second, independent overhead harness that uses the public API only (issue 37).

Nothing here imports from the library's internals or from the other benches: the tools are
declared as the README's tour declares them (``@function_tool`` over ``@compensable(undo=...)``),
the journals are named as a user names them (``Sagacity(":memory:")``, ``Sagacity("file.db")``,
``Sagacity("postgresql://...")`` migrated by the ``sagacity db migrate`` command), and runs go
through ``Sagacity.run``; the statistics are written afresh below.

The run: 20 calls of a one-argument tool (``hold(seat: str)``, one call per model turn), then a
final answer, scripted with ``agents.testing.ScriptedModel``; tracing disabled. A sync and an
async variant of the tool. Each round runs, in an order rotated by one place per round, with
``gc.collect()`` before each run: bare (``Runner.run`` on the undecorated tools) and wrapped on
each journal, sync and async. Between rounds, the bare SQLite commit (INSERT + COMMIT of a
~300-byte row, WAL, ``synchronous=FULL``, median of 20) and, with PostgreSQL, the bare autocommit
INSERT round trip (median of 20) are timed. Warm-up rounds are discarded; then >= 30 rounds.

Per round, paired: added per call = (wrapped - bare of the same tool kind) / 20; per turn =
(wrapped - bare) / bare; beyond = added per call - that round's bare commit. Printed: the medians
over the rounds with a 95 % interval by bootstrap (10,000 resamples of the rounds, percentile
interval of the median: stated because ``bench/overhead.py --durable`` uses order statistics
instead, so the two harnesses also differ in that), and the targets beside them.

    python bench/public_harness.py [--rounds 30] [--warmup 5] [--pg postgresql://...|--no-pg]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import CompensationContext, Sagacity, SagaStatus, compensable

CALLS = 20
TARGETS = {"sqlite/beyond_us": 450.0, "postgres/beyond_us": 500.0, "memory/async/turn_pct": 5.0,
           "memory/sync/turn_pct": 6.0, "memory/async/added_us": 150.0, "memory/sync/added_us": 150.0}


def release_seat(ctx: CompensationContext) -> None:
    """The undo (never run here: every run succeeds)."""


def build_tools() -> dict[str, tuple[Any, Any]]:
    """{kind: (bare tool, wrapped tool)} for kind "async" and "sync"; all named ``hold``."""

    @function_tool(name_override="hold")
    async def hold_bare(seat: str) -> str:
        """Hold ``seat``."""
        return f"held {seat}"

    @function_tool(name_override="hold")
    @compensable(undo=release_seat)
    async def hold(seat: str) -> str:
        """Hold ``seat``."""
        return f"held {seat}"

    @function_tool(name_override="hold")
    def hold_bare_sync(seat: str) -> str:
        """Hold ``seat``."""
        return f"held {seat}"

    @function_tool(name_override="hold")
    @compensable(undo=release_seat)
    def hold_sync(seat: str) -> str:
        """Hold ``seat``."""
        return f"held {seat}"

    return {"async": (hold_bare, hold), "sync": (hold_bare_sync, hold_sync)}


def scripted_agent(tool: Any, calls: int = CALLS) -> Agent[Any]:
    model = ScriptedModel()
    for i in range(calls):
        model.enqueue([function_call("hold", {"seat": f"{i}A"}, call_id=f"h{i}")])
    model.enqueue([assistant_message("all held")])
    return Agent(name="harness", model=model, tools=[tool])


class BareSqlite:
    """The bare SQLite commit the targets are stated against."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, body TEXT)")

    async def once(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("INSERT INTO floor (body) VALUES (?)", ("y" * 300,))
        self.db.execute("COMMIT")


class BarePostgres:
    """One autocommit INSERT round trip on the server the journal uses."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def once(self) -> None:
        await self.conn.execute("INSERT INTO harness_floor (body) VALUES (%s)", ("y" * 300,))


async def median_commit(floor: Any, n: int = 20) -> float:
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        await floor.once()
        took.append(time.perf_counter() - t0)
    return statistics.median(took)


def bootstrap(values: list[float], resamples: int = 10_000, seed: int = 11) -> tuple[float, float, float]:
    """(median, 2.5th, 97.5th percentile of the bootstrap medians)."""
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(statistics.median([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    return statistics.median(values), meds[int(resamples * 0.025)], meds[int(resamples * 0.975) - 1]


async def open_postgres(server: str) -> tuple[str, Any, str]:
    """(journal URI on a fresh schema migrated by the CLI, a floor connection, schema name)."""
    import psycopg

    schema = f"harness_{os.getpid()}"
    admin = await psycopg.AsyncConnection.connect(server, autocommit=True, connect_timeout=3)
    await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    await admin.close()
    uri = f"{server}{'&' if '?' in server else '?'}options=-csearch_path%3D{schema}"
    subprocess.run([sys.executable, "-m", "sagacity_agents", "db", "migrate", "--db", uri],
                   check=True, capture_output=True)
    conn = await psycopg.AsyncConnection.connect(uri, autocommit=True)
    await conn.execute("CREATE TABLE harness_floor (id bigserial PRIMARY KEY, body text)")
    return uri, conn, schema


async def drop_schema(server: str, schema: str) -> None:
    import psycopg

    admin = await psycopg.AsyncConnection.connect(server, autocommit=True)
    await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await admin.close()


async def timed(runner: Sagacity | None, tool: Any) -> float:
    agent = scripted_agent(tool)
    if runner is None:
        t0 = time.perf_counter()
        result = await Runner.run(agent, "hold the seats", max_turns=CALLS + 5)
        took = time.perf_counter() - t0
        assert result.final_output == "all held", result.final_output
        return took
    t0 = time.perf_counter()
    saga = await runner.run(agent, "hold the seats", max_turns=CALLS + 5)
    took = time.perf_counter() - t0
    if saga.status is not SagaStatus.COMPLETED:
        raise RuntimeError(f"wrapped run ended {saga.status}: {saga.exception!r}")
    return took


async def measure(rounds: int = 30, warmup: int = 5, pg: str | None = None,
                  out_dir: str | None = None) -> dict[str, Any]:
    """Raw per-round seconds for every run and floor; see the module notes."""
    set_tracing_disabled(True)
    tools = build_tools()
    tmp = Path(tempfile.mkdtemp(prefix="public-harness-", dir=out_dir))
    journals: dict[str, Sagacity] = {"memory": Sagacity(":memory:"), "sqlite": Sagacity(str(tmp / "journal.db"))}
    floors: dict[str, Any] = {"sqlite": BareSqlite(tmp / "floor.db")}
    pg_note, schema, pg_conn = "not asked for", None, None
    if pg:
        try:
            uri, pg_conn, schema = await open_postgres(pg)
        except Exception as exc:  # noqa: BLE001 - reported: the section says why
            pg_note = f"skipped: {type(exc).__name__}: {exc}"
        else:
            journals["postgres"], floors["postgres"], pg_note = Sagacity(uri), BarePostgres(pg_conn), "measured"
    plan = [(f"bare/{k}", None, tools[k][0]) for k in tools]
    plan += [(f"{j}/{k}", journals[j], tools[k][1]) for j in journals for k in tools]
    raw: dict[str, list[float]] = {name: [] for name, _, _ in plan} | {f"{f}/commit": [] for f in floors}
    load_before = os.getloadavg()
    gc.collect()
    try:
        for r in range(warmup + rounds):
            turn = plan[r % len(plan):] + plan[:r % len(plan)]
            seen = {}
            for name, runner, tool in turn:
                gc.collect()
                seen[name] = await timed(runner, tool)
            for fname, floor in floors.items():
                seen[f"{fname}/commit"] = await median_commit(floor)
            if r >= warmup:
                for name, value in seen.items():
                    raw[name].append(value)
    finally:
        for sagacity in journals.values():
            await sagacity.aclose()
        if pg_conn is not None:
            await pg_conn.close()
        if schema is not None and pg:
            await drop_schema(pg, schema)
    return {"raw_s": raw, "rounds": rounds, "warmup": warmup, "postgres": pg_note, "cpus": os.cpu_count(),
            "loadavg": [load_before, os.getloadavg()], "order": [name for name, _, _ in plan]}


def summarise(result: dict[str, Any]) -> dict[str, tuple[float, float, float]]:
    """Per-round paired figures, each as (median, low, high) of a 95 % bootstrap interval."""
    raw, out = result["raw_s"], {}
    for name, values in raw.items():
        journal, _, kind = name.partition("/")
        if journal == "bare" or kind == "commit":
            continue
        bare = raw[f"bare/{kind}"]
        added = [(w - b) / CALLS * 1e6 for w, b in zip(values, bare, strict=True)]
        out[f"{name}/added_us"] = bootstrap(added)
        out[f"{name}/turn_pct"] = bootstrap([(w - b) / b * 100 for w, b in zip(values, bare, strict=True)])
        if f"{journal}/commit" in raw:
            commit = [c * 1e6 for c in raw[f"{journal}/commit"]]
            out[f"{name}/beyond_us"] = bootstrap([a - c for a, c in zip(added, commit, strict=True)])
            out[f"{journal}/commit_us"] = bootstrap(commit)
    return out


def report(result: dict[str, Any]) -> str:
    s = summarise(result)
    (b1, _, _), (a1, _, _) = result["loadavg"]
    lines = [f"public-API harness: {CALLS} calls of a one-argument tool + a final answer; {result['rounds']}"
             f" rounds after {result['warmup']} warm-up, {len(result['order'])} runs per round in a rotating"
             f" order, gc.collect() before each; {result['cpus']} CPUs, load average {b1:.2f} -> {a1:.2f};"
             f" PostgreSQL: {result['postgres']}",
             "medians over rounds of paired differences; [95 % bootstrap interval of the median]"]

    def fig(key: str, unit: str, target_key: str) -> str:
        m, lo, hi = s[key]
        target = TARGETS[target_key]
        return (f"{m:+.1f}{unit} [{lo:+.1f}, {hi:+.1f}] target <= {target:g}{unit}:"
                f" {'met' if m <= target else 'MISSED'}")

    for kind in ("async", "sync"):
        lines.append(f"  memory   {kind:5s} per turn {fig(f'memory/{kind}/turn_pct', ' %', f'memory/{kind}/turn_pct')};"
                     f" added per call {fig(f'memory/{kind}/added_us', ' us', f'memory/{kind}/added_us')}")
    for journal in ("sqlite", "postgres"):
        if f"{journal}/commit_us" not in s:
            continue
        c = s[f"{journal}/commit_us"]
        lines.append(f"  {journal}: bare commit {c[0]:.0f} us [{c[1]:.0f}, {c[2]:.0f}]")
        for kind in ("async", "sync"):
            a = s[f"{journal}/{kind}/added_us"]
            lines.append(f"    {kind:5s} beyond the commit {fig(f'{journal}/{kind}/beyond_us', ' us', f'{journal}/beyond_us')};"
                         f" added per call {a[0]:+.0f} us (x{a[0] / c[0]:.2f} the median commit)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="measured rounds (>= 30 for the target)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--pg", default=os.environ.get("SAGACITY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--dir", default=None, help="where the SQLite files go (default: temp)")
    parser.add_argument("--json", default=None, help="write raw times and figures here")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.rounds, args.warmup, None if args.no_pg else args.pg, args.dir))
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result | {"figures": summarise(result)}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

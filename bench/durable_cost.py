"""``bench/overhead.py --durable``: what a durable journal costs per tool call, in multiples of
one bare durable commit measured in the same run (issue 22, item 7).

Each round, interleaved: one scripted run of ``calls`` tool calls per variant (bare async and
sync tools, then the same tools under ``@compensable`` on a SQLite journal with
``synchronous=FULL`` and, when the server answers, on PostgreSQL), and ``commits`` bare
INSERT + COMMIT of a ~300-byte row on the same storage (SQLite: WAL, FULL, this thread;
PostgreSQL: one autocommit INSERT per round trip). Per round and variant:

    added per call = (wrapped run - bare run of the same tool kind) / calls
    multiple       = added per call / median bare commit latency of that round

Printed: the median over the rounds with a 95 % interval (bootstrap of the median, 2,000
resamples), the cost to the run beside it (added per call in microseconds, and the run's wall
time per call), fsyncs per call on SQLite (``bench/fsyncs.py``, when strace is installed), and
the load average (a loaded machine inflates everything). Targets (issue 22): SQLite and
PostgreSQL <= 2.5x one bare durable commit per call; 1 fsync per call.

``agent-saga`` (the closest peer) is measured beside when it is installed; it is not a
dependency, and the section says when it was not found.
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PG = os.environ.get("SAGACITY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def interval(values: list[float], resamples: int = 2000, seed: int = 7) -> tuple[float, float, float]:
    """(median, low, high): the median and a 95 % bootstrap percentile interval for it."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def _tools() -> dict[str, Any]:
    from agents import function_tool

    from sagacity_agents import compensable

    def undo(ctx: Any) -> None:  # never called: the runs succeed
        pass

    @function_tool
    async def reserve(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        return f"R-{item}-{qty}"

    @function_tool(name_override="reserve")
    def reserve_sync(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        return f"R-{item}-{qty}"

    @function_tool(name_override="reserve")
    @compensable(undo=undo)
    async def wrapped(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        return f"R-{item}-{qty}"

    @function_tool(name_override="reserve")
    @compensable(undo=undo)
    def wrapped_sync(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        return f"R-{item}-{qty}"

    return {"async": (reserve, wrapped), "sync": (reserve_sync, wrapped_sync)}


def _agent(tool: Any, calls: int) -> Any:
    from agents import Agent
    from agents.testing import ScriptedModel, assistant_message, function_call

    model = ScriptedModel()
    for i in range(calls):
        model.enqueue([function_call("reserve", {"item": f"item-{i}", "qty": i + 1}, call_id=f"call_{i}")])
    model.enqueue([assistant_message("done")])
    return Agent(name="bench", model=model, tools=[tool])


class _SqliteFloor:
    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT)")

    async def commit(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO t (body) VALUES (?)", ("x" * 300,))
        self.conn.execute("COMMIT")


class _PgFloor:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def commit(self) -> None:
        await self.conn.execute("INSERT INTO sagacity_bench_floor (body) VALUES (%s)", ("x" * 300,))


async def _floor(floor: Any, n: int) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await floor.commit()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def run_durable(calls: int = 20, rounds: int = 30, warmup: int = 3, commits: int = 20,
                      progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The measurements above, as a JSON-able dict (see :func:`print_durable`)."""
    from agents import Runner, set_tracing_disabled

    from sagacity_agents import Sagacity, SagaStatus
    from sagacity_agents.backends import InMemoryJournal, SqliteJournal

    set_tracing_disabled(True)
    tools = _tools()
    tmp = Path(tempfile.mkdtemp(prefix="sagacity-durable-"))
    backends: dict[str, tuple[Any, Any]] = {
        "memory": (Sagacity(InMemoryJournal()), None),
        "sqlite-full": (Sagacity(SqliteJournal(tmp / "journal.db")), _SqliteFloor(tmp / "floor.db")),
    }
    pg_conn = None
    try:
        import psycopg

        from sagacity_agents.backends.postgres.journal import PostgresJournal
        from sagacity_agents.backends.postgres.migrations import migrate

        schema = f"sagacity_durable_bench_{os.getpid()}"
        admin = await psycopg.AsyncConnection.connect(PG, autocommit=True, connect_timeout=3)
        await admin.execute(f'CREATE SCHEMA "{schema}"')
        await admin.close()
        uri = f"{PG}{'&' if '?' in PG else '?'}options=-csearch_path%3D{schema}"
        await migrate(uri)
        pg_conn = await psycopg.AsyncConnection.connect(uri, autocommit=True)
        await pg_conn.execute("CREATE TABLE sagacity_bench_floor (id bigserial PRIMARY KEY, body text)")
        backends["postgres"] = (Sagacity(PostgresJournal(uri)), _PgFloor(pg_conn))
    except Exception as exc:  # noqa: BLE001 - no server: the section says so
        skipped_pg: str | None = f"{type(exc).__name__}: {exc}"
    else:
        skipped_pg = None
    series: dict[str, list[float]] = {}
    try:
        for r in range(warmup + rounds):
            for kind, (bare_tool, wrapped_tool) in tools.items():
                start = time.perf_counter()
                await Runner.run(_agent(bare_tool, calls), "go", max_turns=calls + 5)
                bare = time.perf_counter() - start
                for name, (sagacity, floor) in backends.items():
                    commit = await _floor(floor, commits) if floor is not None else None
                    start = time.perf_counter()
                    saga = await sagacity.run(_agent(wrapped_tool, calls), "go", max_turns=calls + 5)
                    elapsed = time.perf_counter() - start
                    if saga.status is not SagaStatus.COMPLETED:
                        raise RuntimeError(f"{name} {kind} run ended {saga.status}: {saga.exception!r}")
                    if r < warmup:
                        continue
                    added = (elapsed - bare) / calls
                    series.setdefault(f"{name}/{kind}/added_us", []).append(added * 1e6)
                    series.setdefault(f"{name}/{kind}/run_per_call_us", []).append(elapsed / calls * 1e6)
                    series.setdefault(f"{name}/{kind}/per_turn_pct", []).append((elapsed - bare) / bare * 100)
                    if commit is not None:
                        series.setdefault(f"{name}/{kind}/multiple", []).append(added / commit)
                        series.setdefault(f"{name}/commit_us", []).append(commit * 1e6)
            if progress is not None:
                progress(r + 1, warmup + rounds)
    finally:
        for sagacity, _ in backends.values():
            await sagacity.aclose()
        if pg_conn is not None:
            await pg_conn.close()
            admin = await psycopg.AsyncConnection.connect(PG, autocommit=True)
            await admin.execute(f'DROP SCHEMA IF EXISTS "sagacity_durable_bench_{os.getpid()}" CASCADE')
            await admin.close()
    fsyncs: dict[str, Any] = {}
    try:
        import shutil

        if shutil.which("strace"):
            import importlib.util

            spec = importlib.util.spec_from_file_location("fsyncs", Path(__file__).with_name("fsyncs.py"))
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            fsyncs = {"per_run": module.count(calls, False), "calls": calls}
    except Exception as exc:  # noqa: BLE001
        fsyncs = {"error": str(exc)}
    try:
        import agent_saga  # type: ignore[import-not-found]  # noqa: F401
        peer = "installed, not yet measured by this section"
    except ImportError:
        peer = "agent-saga not installed: no peer figures"
    return {"series": {k: interval(v) for k, v in series.items()}, "fsyncs": fsyncs,
            "postgres_skipped": skipped_pg, "peer": peer, "calls": calls, "rounds": rounds,
            "loadavg": os.getloadavg()}


def print_durable(result: dict[str, Any]) -> None:
    """Print :func:`run_durable`'s result."""
    s = result["series"]
    print(f"\n== durable cost per call ({result['calls']} calls per run, {result['rounds']} rounds; "
          f"load average {tuple(round(x, 2) for x in result['loadavg'])}) ==")
    for kind in ("async", "sync"):
        a, pct = s["memory/" + kind + "/added_us"], s["memory/" + kind + "/per_turn_pct"]
        print(f"memory {kind:5s} tool: +{a[0]:.0f} us [{a[1]:.0f}, {a[2]:.0f}] per call, "
              f"+{pct[0]:.1f} % [{pct[1]:.1f}, {pct[2]:.1f}] per turn"
              + ("  (target <= 5 %)" if kind == "async" else
                 f"  ({a[0] / s['memory/async/added_us'][0]:.2f}x the async tool's; target <= 1.3x, <= 150 us)"))
    for backend in ("sqlite-full", "postgres"):
        if f"{backend}/commit_us" not in s:
            print(f"{backend}: skipped ({result.get('postgres_skipped')})")
            continue
        c = s[f"{backend}/commit_us"]
        print(f"{backend}: bare INSERT+COMMIT {c[0]:.0f} us [{c[1]:.0f}, {c[2]:.0f}]  (target <= 2.5x per call)")
        for kind in ("async", "sync"):
            m, a, run = (s[f"{backend}/{kind}/{x}"] for x in ("multiple", "added_us", "run_per_call_us"))
            print(f"  {kind:5s} tool: x{m[0]:.2f} [{m[1]:.2f}, {m[2]:.2f}] of a bare commit;"
                  f" +{a[0]:.0f} us [{a[1]:.0f}, {a[2]:.0f}] per call; run {run[0]:.0f} us per call")
    f = result["fsyncs"]
    if "per_run" in f:
        print(f"fsyncs (SQLite FULL, strace): {f['per_run']} per {f['calls']}-call run, "
              f"{f['per_run'] / f['calls']:.2f} per call (target 1)")
    else:
        print(f"fsyncs: not counted ({f.get('error', 'strace not installed')})")
    print(f"peer: {result['peer']}")

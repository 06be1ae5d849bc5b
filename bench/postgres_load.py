"""PostgreSQL under concurrency: S concurrent sagas x C calls each, in one process or in P
processes, on the documented default pool (10 connections, 10 s wait), with the scripted model
(no network). Prints what completed, what failed and why (a pool wait that ends in the clear
"pool exhausted" error before any body runs), the pool wait per connection request (p50/p99),
and where an append's time goes: waiting for a pooled connection (queue), the statement (the
append itself: the server's lock wait, tail read and insert), and the flush an append under
contention waits for (its commit, shared with the others queued: ``_FLUSH``).

If no saga finishes and no append completes for ``--stall-seconds`` while some are still running, the process prints a
coroutine-level dump of every task (``asyncio.all_tasks()``, each task's stack) and the pool's
stats, then cancels the rest: what a hang looks like from inside.

    python bench/postgres_load.py [--sagas 200] [--calls 5] [--processes 1] [--db URI]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agents import set_tracing_disabled  # noqa: E402
from overhead import _agent, _pct, _wrapped_tool  # noqa: E402

from sagacity_agents import Sagacity, SagaStatus  # noqa: E402
from sagacity_agents.backends import PostgresJournal  # noqa: E402

set_tracing_disabled(True)


class Timings:
    """Durations (seconds) by kind, recorded by the wrappers :func:`instrument` installs."""

    def __init__(self) -> None:
        self.pool_wait: list[float] = []
        self.statement: list[float] = []
        self.flush: list[float] = []
        self.append: list[float] = []


def _timed(method: Any, sink: list[float]) -> Any:
    """``method`` (a coroutine function), its durations appended to ``sink``."""

    async def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - start)

    return timed


def instrument(journal: PostgresJournal, timings: Timings) -> Any:
    """Time the pool's ``getconn`` (queue wait), each append statement, each flush and each
    whole append, by wrapping this journal's database and methods (nothing in the library
    changes). Returns a function that takes psycopg's ``execute`` back."""
    from sagacity_agents.backends.postgres import journal as pg_journal

    database = journal.database
    real_pool = database.pool

    async def pool() -> Any:
        found = await real_pool()
        if not getattr(found, "_bench_wrapped", False):
            found.getconn = _timed(found.getconn, timings.pool_wait)
            found._bench_wrapped = True
            database._pools[asyncio.get_running_loop()] = found
        return found

    database.pool = pool  # type: ignore[method-assign]
    database._pools.clear()  # the first run() goes through pool() and wraps

    journal.append = _timed(journal.append, timings.append)  # type: ignore[method-assign]

    async def traced_execute(conn: Any, query: Any, *args: Any, real: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await real(conn, query, *args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            text = query if isinstance(query, str) else ""
            if text == pg_journal._FLUSH:
                timings.flush.append(elapsed)
            elif text.startswith(("SELECT * FROM sagacity_append", "INSERT INTO sagacity_journal",
                                  "WITH lazy")):
                timings.statement.append(elapsed)

    import psycopg

    real_execute = psycopg.AsyncConnection.execute

    async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        return await traced_execute(self, query, *args, real=real_execute, **kwargs)

    psycopg.AsyncConnection.execute = execute  # type: ignore[method-assign]

    def undo() -> None:
        psycopg.AsyncConnection.execute = real_execute  # type: ignore[method-assign]

    return undo


def dump_tasks(out: io.TextIOBase | Any = sys.stderr) -> dict[str, int]:
    """Print a coroutine-level dump: every distinct await chain (each task's stack, outermost
    first, walked through the coroutines it awaits) once, with how many tasks share it; returns
    ``{chain: count}``."""
    chains: dict[str, int] = {}
    for task in asyncio.all_tasks():
        frames, coro = [], task.get_coro()
        while coro is not None and hasattr(coro, "cr_frame") or hasattr(coro, "ag_frame"):
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
            if frame is None:
                break
            frames.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"
                          f":{frame.f_lineno}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        awaiting = type(coro).__name__ if coro is not None else "-"
        key = " > ".join(frames) + f" [awaits {awaiting}]"
        chains[key] = chains.get(key, 0) + 1
    for key, count in sorted(chains.items(), key=lambda kv: -kv[1]):
        print(f"{count:5} x {key}", file=out)
    return chains


async def run_sagas(uri: str, *, sagas: int, calls: int, stall_seconds: float,
                    lease_seconds: float = 30.0) -> dict[str, Any]:
    """``sagas`` concurrent runs of ``calls`` calls each in this process (the default pool)."""
    journal = PostgresJournal(uri)
    timings = Timings()
    undo = instrument(journal, timings)
    try:
        return await _run_sagas(journal, timings, sagas, calls, stall_seconds, lease_seconds)
    finally:
        undo()


async def _run_sagas(journal: PostgresJournal, timings: Timings, sagas: int, calls: int,
                     stall_seconds: float, lease_seconds: float) -> dict[str, Any]:
    s = Sagacity(journal, lease_seconds=lease_seconds)
    finished = [time.monotonic()]
    appended = [0]

    async def one(i: int) -> str:
        try:
            result = await s.run(_agent(_wrapped_tool(), calls), "go")
            return result.status.value
        except Exception as exc:  # noqa: BLE001 - counted by kind
            return f"{type(exc).__name__}: {str(exc)[:400]}"
        finally:
            finished[0] = time.monotonic()

    start = time.perf_counter()
    tasks = [asyncio.ensure_future(one(i)) for i in range(sagas)]
    dump: dict[str, int] | None = None
    pending = set(tasks)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=1.0)
        if len(timings.append) != appended[0]:  # an append completed: the load moves
            appended[0], finished[0] = len(timings.append), time.monotonic()
        if pending and time.monotonic() - finished[0] > stall_seconds:
            print(f"STALLED: {len(pending)} runs pending, no run ended and no append completed "
                  f"for {stall_seconds} s", file=sys.stderr)
            pool = journal.database._pools.get(asyncio.get_running_loop())
            if pool is not None:
                print("pool stats:", pool.get_stats(), file=sys.stderr)
            dump = dump_tasks()
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            break
    wall = time.perf_counter() - start
    outcomes: dict[str, int] = {}
    for task in tasks:
        key = task.result() if task.done() and not task.cancelled() else "HUNG (cancelled)"
        key = "pool exhausted" if "exhausted" in key else key
        outcomes[key] = outcomes.get(key, 0) + 1
    pool = journal.database._pools.get(asyncio.get_running_loop())
    stats = dict(pool.get_stats()) if pool is not None else {}
    await journal.close()
    return {"sagas": sagas, "calls": calls, "wall_s": wall, "outcomes": outcomes,
            "calls_per_s": outcomes.get(SagaStatus.COMPLETED.value, 0) * calls / wall,
            "timings": {name: _ms(getattr(timings, name)) for name in
                        ("pool_wait", "statement", "flush", "append")},
            "pool_stats": stats, "stall_dump": dump}


def _ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_ms": _pct(values, 50) * 1e3, "p99_ms": _pct(values, 99) * 1e3,
            "mean_ms": sum(values) / len(values) * 1e3}


def _child(uri: str, sagas: int, calls: int, stall: float, lease: float, out: Any) -> None:
    out.put(asyncio.run(run_sagas(uri, sagas=sagas, calls=calls, stall_seconds=stall,
                                  lease_seconds=lease)))


async def run_benchmark(uri: str, *, sagas: int, calls: int, processes: int,
                        stall_seconds: float = 60.0, lease_seconds: float = 30.0) -> dict[str, Any]:
    """The load in a fresh migrated schema of the server at ``uri``."""
    from postgres_append import scratch_schema

    async with scratch_schema(uri) as scoped:
        if processes <= 1:
            return {"processes": 1, "runs": [await run_sagas(
                scoped, sagas=sagas, calls=calls, stall_seconds=stall_seconds,
                lease_seconds=lease_seconds)]}
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=_child, args=(scoped, sagas, calls, stall_seconds, lease_seconds, out))
                 for _ in range(processes)]
        for proc in procs:
            proc.start()
        loop = asyncio.get_running_loop()
        runs = [await loop.run_in_executor(None, out.get) for _ in procs]
        for proc in procs:
            proc.join()
        return {"processes": processes, "runs": runs}


def print_report(result: dict[str, Any]) -> None:
    for i, run in enumerate(result["runs"]):
        t = run["timings"]
        print(f"process {i}: {run['sagas']} sagas x {run['calls']} calls in {run['wall_s']:.1f} s "
              f"({run['calls_per_s']:.0f} calls/s): {run['outcomes']}")
        for name in ("pool_wait", "statement", "flush", "append"):
            cell = t[name]
            if cell["n"]:
                print(f"  {name:10} n={cell['n']:6} p50 {cell['p50_ms']:8.1f} ms  "
                      f"p99 {cell['p99_ms']:8.1f} ms  mean {cell['mean_ms']:8.1f} ms")
        if run["stall_dump"]:
            print(f"  STALLED: {len(run['stall_dump'])} distinct await chains (printed on stderr)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sagas", type=int, default=200, help="concurrent sagas per process")
    parser.add_argument("--calls", type=int, default=5, help="calls per saga")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--stall-seconds", type=float, default=60.0,
                        help="dump every task and stop when no saga ends for this long")
    parser.add_argument("--lease-seconds", type=float, default=30.0,
                        help="the run lease (short: keepers beat while appends queue)")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)
    result = asyncio.run(run_benchmark(args.db, sagas=args.sagas, calls=args.calls,
                                       processes=args.processes, stall_seconds=args.stall_seconds,
                                       lease_seconds=args.lease_seconds))
    print_report(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

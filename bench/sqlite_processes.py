"""Several processes appending to one SQLite journal file (issue 22, item 5): append latency
percentiles against one process's bare FULL commit, measured in the same run.

First one process times ``--n`` bare INSERT + COMMIT (WAL, ``synchronous=FULL``) on a file of
its own: its p99 is the yardstick. Then ``--processes`` processes (default 4), started together,
each append ``--n`` entries to a saga of their own in one shared journal file, as a run writes
them (INTENT, durable; EXECUTED, committed without waiting for the disk), timing every append.
Printed: p50 / p99 / max of the appends over all processes, p99 as a multiple of the bare
commit's p99 (target <= 3x), and the longest wait against the configured bound
(``busy_timeout``; no append may wait longer). The load average is printed beside.

Usage::

    python bench/sqlite_processes.py [--processes 4] [--n 400]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round((len(s) - 1) * q / 100.0)))]


def bare_commits(path: Path, n: int) -> list[float]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT)")
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (body) VALUES (?)", ("x" * 300,))
        conn.execute("COMMIT")
        samples.append(time.perf_counter() - start)
    conn.close()
    return samples


def _writer(path: str, name: str, n: int, barrier: object, out: object, bound: float) -> None:
    from sagacity_agents.backends import Phase, SqliteJournal

    async def main() -> list[float]:
        journal = SqliteJournal(path, busy_timeout=bound)
        samples = []
        try:
            barrier.wait()  # type: ignore[attr-defined]
            for i in range(n // 2):
                for phase, key in ((Phase.INTENT, "intent"), (Phase.EXECUTED, "outcome")):
                    start = time.perf_counter()
                    await journal.append(name, phase, write_key=f"{i}:{key}", tool="t",
                                         call_id=f"c{i}", payload={"intent_seq": 2 * i + 1})
                    samples.append(time.perf_counter() - start)
        finally:
            await journal.close()
        return samples

    out.put(asyncio.run(main()))  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--n", type=int, default=400, help="appends per process (and bare commits)")
    parser.add_argument("--bound", type=float, default=30.0, help="busy_timeout, seconds")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sagacity-mp-"))
    print(f"{args.processes} processes on one SQLite file, load average {os.getloadavg()}")
    bare = bare_commits(tmp / "bare.db", args.n)
    from sagacity_agents.backends import SqliteJournal

    asyncio.run(SqliteJournal(tmp / "journal.db").close())  # created once, before the race
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(args.processes), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp / "journal.db"), f"s{k}", args.n, barrier, out,
                                               args.bound)) for k in range(args.processes)]
    for p in procs:
        p.start()
    samples: list[float] = []
    for _ in procs:
        samples += out.get()
    for p in procs:
        p.join()
    b99 = _pct(bare, 99)
    print(f"bare FULL commit, one process: p50 {statistics.median(bare) * 1e3:.2f} ms, "
          f"p99 {b99 * 1e3:.2f} ms")
    print(f"appends, {args.processes} processes: p50 {statistics.median(samples) * 1e3:.2f} ms, "
          f"p99 {_pct(samples, 99) * 1e3:.2f} ms ({_pct(samples, 99) / b99:.2f}x the bare p99; "
          f"target <= 3x), max {max(samples) * 1e3:.2f} ms (bound {args.bound} s)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

"""Cost of the still-dirty / in-doubt / awaiting-approval gauges (``core.health.saga_health``,
``sagacity_agents.otel.instrument(gauges_from=...)``) on a 200 k-entry journal.

The journal holds ``--sagas`` sagas of ``--entries-per-saga`` entries each (default 20 000 x 10
= 200 000): most closed COMPLETED, one in ten closed COMPENSATED (a tenth of those with a failed
undo: still dirty), one in a hundred left open IN_DOUBT, one in a hundred AWAITING_APPROVAL. It is
built once per backend (kept in ``--dir`` for the next run), then one gauge collection (the
count, what a metric reader's collection runs) is timed ``--repeat`` times: the median and the
fastest are printed with the counts, so the figure can be checked against what was built.

Usage::

    python bench/observe_gauges.py [--sagas 20000] [--entries-per-saga 10] [--repeat 5]
                                   [--dir DIR] [--postgres URI] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.core.health import saga_health
from sagacity_agents.core.journal import Journal, append_each

REPORT_CLEAN = {"undone": [{"seq": 3}], "failed": [], "no_undo": [], "in_doubt": []}
REPORT_DIRTY = {**REPORT_CLEAN, "failed": [{"seq": 5, "detail": "refund API down"}]}


def saga_plan(n: int, per_saga: int) -> list[tuple[Phase, dict[str, Any]]]:
    """The entries of saga ``n`` (its last one says where it stands)."""
    body = [(Phase.SAGA_OPENED, {"metadata": {}}), (Phase.RUN_STARTED, {"agent": "bench", "holder": "h"})]
    calls = max(per_saga - 4, 0)
    for i in range(calls):
        phase = Phase.INTENT if i % 2 == 0 else Phase.EXECUTED
        body.append((phase, {"args": {"i": i}} if phase is Phase.INTENT else {"intent_seq": 3 + i, "result": "ok"}))
    if n % 100 == 7:
        return [*body, (Phase.SAGA_FAILED, {"reason": "x"}), (Phase.RUN_ENDED, {"status": "IN_DOUBT"})]
    if n % 100 == 8:
        return [*body, (Phase.AWAITING_APPROVAL, {"request_id": f"r{n}"}),
                (Phase.RUN_ENDED, {"status": "AWAITING_APPROVAL"})]
    if n % 10 == 3:
        report = REPORT_DIRTY if n % 100 == 3 else REPORT_CLEAN
        return [*body, (Phase.RUN_ENDED, {"status": "COMPENSATED"}),
                (Phase.SAGA_CLOSED, {"status": "COMPENSATED", "report": report})]
    return [*body, (Phase.RUN_ENDED, {"status": "COMPLETED"}), (Phase.SAGA_CLOSED, {"status": "COMPLETED"})]


async def fill(journal: Journal, sagas: int, per_saga: int) -> int:
    """Append the planned sagas (``append_many`` where the backend has it); returns entries."""
    written = 0
    for n in range(sagas):
        specs = [{"phase": p, "write_key": f"k{i}", "payload": payload}
                 for i, (p, payload) in enumerate(saga_plan(n, per_saga))]
        await append_each(journal, f"saga-{n:06d}", specs)
        written += len(specs)
    return written


async def time_collection(journal: Journal, repeat: int) -> dict[str, Any]:
    samples, health = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        health = await saga_health(journal)
        samples.append(time.perf_counter() - started)
    assert health is not None
    return {"median_s": round(statistics.median(samples), 4), "min_s": round(min(samples), 4),
            "sagas": health.sagas, "still_dirty": health.still_dirty, "in_doubt": health.in_doubt,
            "awaiting_approval": health.awaiting_approval}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"sagas": args.sagas, "entries": args.sagas * args.entries_per_saga}
    directory = Path(args.dir or tempfile.mkdtemp(prefix="sagacity-gauges-"))
    directory.mkdir(parents=True, exist_ok=True)
    memory = InMemoryJournal()
    await fill(memory, args.sagas, args.entries_per_saga)
    results["memory"] = await time_collection(memory, args.repeat)
    path = directory / f"gauges-{args.sagas}x{args.entries_per_saga}.db"
    fresh = not path.exists()
    sqlite = SqliteJournal(path, synchronous="NORMAL")  # NORMAL to build faster; reads alike
    try:
        if fresh:
            await fill(sqlite, args.sagas, args.entries_per_saga)
        results["sqlite"] = await time_collection(sqlite, args.repeat)
    finally:
        await sqlite.close()
    if args.postgres:
        from sagacity_agents.backends import PostgresJournal

        postgres = PostgresJournal(args.postgres)
        try:
            if not (await postgres.saga_summaries(limit=1)):
                await fill(postgres, args.sagas, args.entries_per_saga)
            results["postgres"] = await time_collection(postgres, args.repeat)
        finally:
            await postgres.close()
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sagas", type=int, default=20_000)
    parser.add_argument("--entries-per-saga", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the SQLite journal is built (kept)")
    parser.add_argument("--postgres", default=None, help="a migrated, empty schema's URI")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    results = asyncio.run(bench(args))
    print(f"{results['entries']} entries in {results['sagas']} sagas; one gauge collection:")
    for backend in ("memory", "sqlite", "postgres"):
        if backend in results:
            r = results[backend]
            print(f"  {backend:8s} median {r['median_s'] * 1000:8.1f} ms  fastest {r['min_s'] * 1000:8.1f} ms"
                  f"  (still dirty {r['still_dirty']}, in doubt {r['in_doubt']}, "
                  f"awaiting {r['awaiting_approval']})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()

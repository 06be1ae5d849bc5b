"""The cost of one lease-keeper beat (``core.lease.LeaseKeeper``: read the saga's tail, journal
LEASE_RENEWED under the lease's fence) on a saga of 10 entries and on one of 100,000, on SQLite
and PostgreSQL: median of N beats each. The target: the beat at 100,000 entries within 20 % of
its cost at 10 (a beat reads the tail, never the whole saga). For comparison, the beat as it was
(the whole saga read, then the append) is measured too, over fewer beats.

The long saga is written directly (its rows sealed with the shared rule, inserted in bulk): one
run's RUN_STARTED then LEASE_RENEWED entries under its fence, the shape of a recovery that
renewed for hours. The keeper measured is a fresh object on a fresh journal object each size.

    python bench/lease_beats.py [--sizes 10,100000] [--beats 100] [--db postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sagacity_agents.backends import Phase, PostgresJournal, SqliteJournal  # noqa: E402
from sagacity_agents.core.journal import AppendRequest, seal, utc_stamp  # noqa: E402
from sagacity_agents.core.lease import LeaseKeeper, lease_of  # noqa: E402

HOLDER = "bench:1:lease"
FENCE = 2


def chain_rows(saga_id: str, size: int) -> list[tuple[Any, ...]]:
    """``size`` sealed entries of one saga (SAGA_OPENED, RUN_STARTED, then LEASE_RENEWED under
    its fence), as stored rows (``entries.STORED_COLUMNS``)."""
    rows, tail = [], None
    now = utc_stamp()
    for seq in range(1, size + 1):
        if seq == 1:
            request = AppendRequest.build(saga_id, Phase.SAGA_OPENED, write_key="saga:open",
                                          payload={"metadata": {}})
        elif seq == FENCE:
            request = AppendRequest.build(saga_id, Phase.RUN_STARTED, write_key="run",
                                          payload={"agent": "bench", "holder": HOLDER,
                                                   "lease_seconds": 3600.0, "took_over": None})
        else:
            request = AppendRequest.build(saga_id, Phase.LEASE_RENEWED, write_key=f"lease:{seq}",
                                          payload={"holder": HOLDER}, fence=FENCE)
        entry = seal(request, tail, now, lease=FENCE if seq > FENCE else None)
        rows.append((entry.saga_id, entry.seq, entry.phase.value, entry.tool, entry.call_id,
                     entry.write_key, entry.recorded_at, entry.prev_hash, entry.hash,
                     entry.canonical, None, None))
        tail = (entry.seq, entry.hash, entry.phase.value)
    return rows


_INSERT = ("INSERT INTO sagacity_journal (saga_id, seq, phase, tool, call_id, write_key, "
           "recorded_at, prev_hash, hash, canonical, tag_key, tag) VALUES ")


async def fill_sqlite(path: str, saga_id: str, size: int) -> None:
    import sqlite3

    SqliteJournal(path)  # creates the schema
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(_INSERT + "(?,?,?,?,?,?,?,?,?,?,?,?)", chain_rows(saga_id, size))
    conn.close()


async def fill_postgres(uri: str, saga_id: str, size: int) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        async with conn.cursor() as cur:
            async with cur.copy(
                "COPY sagacity_journal (saga_id, seq, phase, tool, call_id, write_key, "
                "recorded_at, prev_hash, hash, canonical, tag_key, tag) FROM STDIN"
            ) as copy:
                for row in chain_rows(saga_id, size):
                    await copy.write_row(row)


async def time_beats(journal: Any, saga_id: str, beats: int, *, whole: bool,
                     keeper: LeaseKeeper | None = None) -> list[float]:
    """Seconds per beat: the keeper's (tail) or, with ``whole``, the beat as it was (the whole
    saga read, the lease decided on it, then the append). ``keeper``: the one to beat with (one
    per saga across calls: its renewals' write keys are counted by it)."""
    keeper = keeper or LeaseKeeper(journal, saga_id, HOLDER, 3600.0, lambda: 0.0, fence=FENCE)
    times = []
    for _ in range(beats):
        start = time.perf_counter()
        if whole:
            entries = await journal.entries(saga_id)
            lease = lease_of(entries)
            assert lease is not None and lease.holder == HOLDER
            await journal.append(saga_id, Phase.LEASE_RENEWED, write_key=f"old:{time.time_ns()}",
                                 payload={"holder": HOLDER}, expected_seq=entries[-1].seq,
                                 fence=FENCE)
        else:
            assert await keeper._renew(), "the keeper saw its lease gone"
        times.append(time.perf_counter() - start)
    return times


async def measure(backend: str, location: str, sizes: list[int], beats: int,
                  old_beats: int, rounds: int = 10) -> dict[str, Any]:
    """Median beat cost per saga size on one backend (``location``: a directory or a URI). The
    sizes' beats alternate in ``rounds`` blocks, so that a load change on the machine falls on
    every size alike."""
    journals: dict[int, tuple[Any, str]] = {}
    for size in sizes:
        saga_id = f"beats-{size}-{time.time_ns()}"
        if backend == "sqlite":
            path = str(Path(location) / f"{saga_id}.db")
            await fill_sqlite(path, saga_id, size)
            journals[size] = (SqliteJournal(path), saga_id)
        else:
            await fill_postgres(location, saga_id, size)
            journals[size] = (PostgresJournal(location), saga_id)
    tail: dict[int, list[float]] = {size: [] for size in sizes}
    whole: dict[int, list[float]] = {size: [] for size in sizes}
    try:
        keepers = {size: LeaseKeeper(journal, saga_id, HOLDER, 3600.0, lambda: 0.0, fence=FENCE)
                   for size, (journal, saga_id) in journals.items()}
        for journal, _ in journals.values():
            await journal.entries("warm-up")  # open the pool / connection before timing
        for turn in range(rounds):
            for size, (journal, saga_id) in journals.items():
                share = beats // rounds + (1 if turn < beats % rounds else 0)
                tail[size] += await time_beats(journal, saga_id, share, whole=False,
                                               keeper=keepers[size])
        for size, (journal, saga_id) in journals.items():
            if old_beats:
                whole[size] = await time_beats(journal, saga_id, old_beats, whole=True)
    finally:
        for journal, _ in journals.values():
            await journal.close()
    out: dict[str, Any] = {str(size): {
        "beat_ms_median": statistics.median(tail[size]) * 1e3,
        "first_beat_ms": tail[size][0] * 1e3,
        "whole_saga_beat_ms_median": statistics.median(whole[size]) * 1e3 if whole[size] else None,
    } for size in sizes}
    small, large = out[str(min(sizes))], out[str(max(sizes))]
    out["ratio_large_to_small"] = large["beat_ms_median"] / small["beat_ms_median"]
    return out


async def run_benchmark(*, sizes: list[int], beats: int, old_beats: int,
                        db: str | None) -> dict[str, Any]:
    """Every backend asked for: SQLite always, PostgreSQL when ``db`` is given."""
    result: dict[str, Any] = {"params": {"sizes": sizes, "beats": beats, "old_beats": old_beats}}
    with tempfile.TemporaryDirectory() as tmp:
        result["sqlite"] = await measure("sqlite", tmp, sizes, beats, old_beats)
    if db:
        async with _scratch(db) as scoped:
            result["postgres"] = await measure("postgres", scoped, sizes, beats, old_beats)
    return result


@contextlib.asynccontextmanager
async def _scratch(uri: str):  # type: ignore[no-untyped-def]
    from postgres_append import scratch_schema

    async with scratch_schema(uri) as scoped:
        yield scoped


def print_report(result: dict[str, Any]) -> None:
    for backend in ("sqlite", "postgres"):
        if backend not in result:
            continue
        data = result[backend]
        for size, cell in data.items():
            if size == "ratio_large_to_small":
                continue
            whole = cell["whole_saga_beat_ms_median"]
            print(f"{backend:9} {int(size):>8} entries: beat {cell['beat_ms_median']:.3f} ms "
                  f"(first {cell['first_beat_ms']:.3f} ms)"
                  + (f"; whole-saga beat {whole:.3f} ms" if whole is not None else ""))
        ratio = data["ratio_large_to_small"]
        print(f"{backend:9} ratio largest/smallest: {ratio:.2f} "
              f"({'within' if ratio <= 1.2 else 'OVER'} the 20 % target)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100000", help="saga sizes (entries)")
    parser.add_argument("--beats", type=int, default=100, help="beats per size (median)")
    parser.add_argument("--old-beats", type=int, default=5,
                        help="beats of the whole-saga read, for comparison (0: none)")
    parser.add_argument("--db", default=None, help="a postgresql:// URI (omitted: SQLite only)")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    result = asyncio.run(run_benchmark(sizes=sizes, beats=args.beats, old_beats=args.old_beats,
                                       db=args.db))
    print_report(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

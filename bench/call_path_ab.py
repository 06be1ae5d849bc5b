"""What each call-path change of issue 37 buys, measured A/B in one process, the two settings
taking turns block by block (so a loaded machine's drift falls on both alike):

* ``intent``: one INTENT append to a SQLite journal (``synchronous=FULL``) from an idle event
  loop, written by the loop itself (``writer.loop_idle`` true, the default now) against handed to
  the journal's thread and answered back (``loop_idle`` forced false: the rule before). Both
  make the same commit and the same ``fdatasync``; the difference is the two thread hops.
* ``write-key index``: one journal row (the shape of a call's INTENT) inserted and committed
  (``BEGIN IMMEDIATE``, the tail read, the ``INSERT``, ``COMMIT`` with ``synchronous=FULL``) into
  the journal's own table as shipped (A: with its ``UNIQUE (saga_id, write_key)`` index) and the
  same table without that index (B: what checking the write key by the append rule under the
  lock would leave to the disk). Also printed: the ``-wal`` bytes each commit adds, in pages.
* ``reopen``: the verification a saga's next run makes before acting
  (``core.evidence.verified_entries``) on a saga of ``--entries`` entries, with the entries this
  process verified last time remembered (``VerifiedHeads``, the default now: only the new ones
  hashed) against forgotten before each (every entry hashed: the rule before). Two new entries
  are appended between reopenings, as a one-call run's outcome and RUN_ENDED would be.

Printed per change: the median of each setting's samples and the median of the paired
differences (block medians, B - A) with a 95 % interval (order statistics of the blocks).

    python bench/call_path_ab.py [--blocks 30] [--per-block 20] [--entries 80]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.backends.sqlite import writer as sqlite_writer
from sagacity_agents.core import evidence as evidence_module


def order_interval(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high): distribution-free 95 % interval of the median (order statistics)."""
    s, n = sorted(values), len(values)
    k, below = 0, 0.0
    while below + math.comb(n, k) / 2**n <= 0.025:
        below += math.comb(n, k) / 2**n
        k += 1
    return (statistics.median(s), s[k - 1], s[n - k]) if k else (statistics.median(s), s[0], s[-1])


async def _intent_block(journal: SqliteJournal, saga: str, start: int, n: int, hop: bool) -> float:
    real = sqlite_writer.loop_idle
    if hop:
        sqlite_writer.loop_idle = lambda loop: False  # type: ignore[assignment]
    try:
        took = []
        for i in range(start, start + n):
            t0 = time.perf_counter()
            await journal.append(saga, Phase.INTENT, write_key=f"i{i}", tool="t", call_id=f"c{i}",
                                 payload={"args": {"seat": f"{i}A"}})
            took.append(time.perf_counter() - t0)
            await journal.append(saga, Phase.EXECUTED, write_key=f"o{i}", tool="t", call_id=f"c{i}",
                                 payload={"intent_seq": 0, "result": "ok"})
        return statistics.median(took)
    finally:
        sqlite_writer.loop_idle = real


async def intent(blocks: int, per_block: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="call-path-ab-"))
    journal = SqliteJournal(tmp / "j.db")
    pairs, inline, hopped, i = [], [], [], 0
    try:
        await journal.append("s", Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
        for b in range(blocks + 1):
            order = (False, True) if b % 2 else (True, False)
            got = {}
            for hop in order:
                got[hop] = await _intent_block(journal, "s", i, per_block, hop)
                i += per_block
            if b:  # block 0 warms up
                inline.append(got[False] * 1e6)
                hopped.append(got[True] * 1e6)
                pairs.append((got[True] - got[False]) * 1e6)
    finally:
        await journal.close()
    return {"A: loop writes (now)": order_interval(inline), "B: thread hop (before)": order_interval(hopped),
            "B - A": order_interval(pairs)}


def _journal_ddl(unique_write_key: bool) -> str:
    ddl = (resources.files("sagacity_agents.backends.sqlite") / "sql" / "journal.sql").read_text()
    table = ddl[ddl.index("CREATE TABLE IF NOT EXISTS sagacity_journal"):]
    table = table[:table.index(");") + 2]
    return table if unique_write_key else table.replace(",\n    UNIQUE (saga_id, write_key)", "")


def _row_commit(db: sqlite3.Connection, path: Path, saga: str, seq: int) -> tuple[float, int]:
    """(seconds, -wal bytes added) of one INTENT-shaped row's commit."""
    body = json.dumps({"saga_id": saga, "seq": seq, "phase": "INTENT", "tool": "hold",
                       "payload": {"args": {"seat": f"{seq}A"}, "reversibility": "compensatable"},
                       "prev_hash": "0" * 64, "recorded_at": "2026-12-06T00:00:00.000000Z"}).encode()
    digest = hashlib.sha256(body).hexdigest()
    wal = path.with_name(path.name + "-wal")
    before = wal.stat().st_size if wal.exists() else 0
    t0 = time.perf_counter()
    db.execute("BEGIN IMMEDIATE")
    db.execute("SELECT seq, hash FROM sagacity_journal WHERE saga_id = ? ORDER BY seq DESC LIMIT 1", (saga,))
    db.execute("INSERT INTO sagacity_journal (saga_id, seq, phase, tool, call_id, write_key, recorded_at,"
               " prev_hash, hash, canonical) VALUES (?,?,?,?,?,?,?,?,?,?)",
               (saga, seq, "INTENT", "hold", f"c{seq}", f"{uuid.uuid4().hex[:16]}-{seq}:intent",
                "2026-12-06T00:00:00.000000Z", "0" * 64, digest, body))
    db.execute("COMMIT")
    took = time.perf_counter() - t0
    return took, (wal.stat().st_size if wal.exists() else 0) - before


def write_key_index(blocks: int, per_block: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="call-path-ab-"))
    dbs, seqs, grown = {}, {True: 0, False: 0}, {True: [], False: []}
    for unique in (True, False):
        path = tmp / f"{'unique' if unique else 'plain'}.db"
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA wal_autocheckpoint=0")  # the -wal only grows: its growth is the pages
        db.execute(_journal_ddl(unique))
        dbs[unique] = (db, path)
    page = dbs[True][0].execute("PRAGMA page_size").fetchone()[0]
    pairs, kept, dropped = [], [], []
    for b in range(blocks + 1):
        got: dict[bool, float] = {}
        for unique in ((True, False) if b % 2 else (False, True)):
            db, path = dbs[unique]
            took = []
            for _ in range(per_block):
                seqs[unique] += 1
                seconds, wal_bytes = _row_commit(db, path, f"saga-{seqs[unique] % 50}", seqs[unique])
                took.append(seconds)
                grown[unique].append(wal_bytes)
            got[unique] = statistics.median(took) * 1e6
        if b:
            kept.append(got[True])
            dropped.append(got[False])
            pairs.append(got[True] - got[False])
    for db, _ in dbs.values():
        db.close()
    return {"A: UNIQUE index (as shipped)": order_interval(kept), "B: no write-key index": order_interval(dropped),
            "A - B": order_interval(pairs),
            "-wal pages per commit, A / B": f"{statistics.mean(grown[True]) / (page + 24):.2f} / "
                                            f"{statistics.mean(grown[False]) / (page + 24):.2f}"}


async def reopen(blocks: int, per_block: int, size: int, backend: str) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="call-path-ab-"))
    journal: Any = SqliteJournal(tmp / "r.db") if backend == "sqlite" else InMemoryJournal()
    evidence = evidence_module.Evidence()
    seq = 0

    async def grow(n: int) -> None:
        nonlocal seq
        for _ in range(n):
            seq += 1
            await journal.append("r", Phase.INTENT if seq > 1 else Phase.SAGA_OPENED, write_key=f"k{seq}",
                                 tool="t" if seq > 1 else None, call_id=f"c{seq}" if seq > 1 else None,
                                 payload={"args": {"n": seq}} if seq > 1 else {"metadata": {}})

    await grow(size)
    await evidence.verified_entries(journal, "r")
    pairs, kept, forgot = [], [], []
    try:
        for b in range(blocks + 1):
            got: dict[bool, list[float]] = {True: [], False: []}
            for remember in ((True, False) if b % 2 else (False, True)):
                for _ in range(per_block):
                    await grow(2)
                    if not remember:
                        evidence.heads.__init__()  # type: ignore[misc]  # forget: the rule before
                    t0 = time.perf_counter()
                    await evidence.verified_entries(journal, "r")
                    got[remember].append(time.perf_counter() - t0)
            if b:
                a, z = statistics.median(got[True]) * 1e6, statistics.median(got[False]) * 1e6
                kept.append(a)
                forgot.append(z)
                pairs.append(z - a)
    finally:
        if backend == "sqlite":
            await journal.close()
    return {"A: remembered (now)": order_interval(kept), "B: every entry hashed (before)": order_interval(forgot),
            "B - A": order_interval(pairs), "entries at the end": seq}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--per-block", type=int, default=20)
    parser.add_argument("--entries", type=int, default=80)
    args = parser.parse_args(argv)
    print(f"A/B in one process, {args.blocks} blocks each (after one warm-up), {args.per_block} samples per"
          f" block; {os.cpu_count()} CPUs, load average {tuple(round(x, 2) for x in os.getloadavg())};"
          f" medians of block medians, 95 % intervals by order statistics, us")
    results = {"intent (SQLite FULL, idle loop)": asyncio.run(intent(args.blocks, args.per_block)),
               "write-key index (SQLite FULL, one row's commit)": write_key_index(args.blocks, args.per_block)}
    for backend in ("sqlite", "memory"):
        results[f"reopen verification, {backend}, from {args.entries} entries, 2 more per reopening"] = asyncio.run(
            reopen(args.blocks, max(args.per_block // 4, 2), args.entries, backend))
    for name, figures in results.items():
        print(name)
        for label, value in figures.items():
            print(f"  {label:34s} " + (f"{value[0]:8.1f} [{value[1]:.1f}, {value[2]:.1f}]"
                                       if isinstance(value, tuple) else str(value)))
    print(f"load average after: {tuple(round(x, 2) for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

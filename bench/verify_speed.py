"""How fast ``journal verify`` reads (issue 22, item 4): entries verified per second, in process.

A journal of ``--sagas`` sagas of 100 entries each (SAGA_OPENED, RUN_STARTED, 48 calls as INTENT
+ EXECUTED under the run's fence, RUN_ENDED, SAGA_CLOSED: the shapes a real run writes, taken
from one run of the library and re-sealed under each saga id) is written once to a SQLite file
and, when the server is reachable, to a PostgreSQL schema of its own. Then
``core.evidence.verify_sagas`` (what ``sagacity journal verify`` runs: chain, structure, and
with a keyring the entry tags) is timed over the whole journal, best of ``--repeat``; beside it
an ordered SELECT of the same rows and SHA-256 of the same bytes, the floors it cannot beat.
With ``--keyring-sagas`` sagas (tagged by an Ed25519 keyring at write time) the rate with a
keyring is printed beside.

Targets (issue 22): >= 150 k entries/s without a keyring from the 200 k-entry SQLite file,
>= 100 k/s from PostgreSQL. The load average is printed: on a busy machine the figures are low.

Usage::

    python bench/verify_speed.py [--sagas 2000] [--keyring-sagas 200] [--repeat 3] [--no-pg]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sagacity_agents.backends import InMemoryJournal, SqliteJournal
from sagacity_agents.core.authenticity import EntryTagger
from sagacity_agents.core.entries import JournalEntry, Phase, seal_entry
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.identity import JOURNAL_ID_KEY, BoundTagger, SagaSeal, journal_id_of
from sagacity_agents.core.journal import FENCE_KEY
from sagacity_agents.core.signing import Keyring, generate_key

PG = os.environ.get("SAGACITY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
_COLUMNS = ("saga_id", "seq", "phase", "tool", "call_id", "write_key", "recorded_at", "prev_hash",
            "hash", "canonical", "tag_key", "tag")


async def template() -> list[JournalEntry]:
    """One saga of 100 entries as a run of the library writes it (in memory)."""
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import Sagacity, compensable

    set_tracing_disabled(True)

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def reserve(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        return f"R-{item}-{qty}"

    model = ScriptedModel()
    for i in range(48):
        model.enqueue([function_call("reserve", {"item": f"item-{i}", "qty": i + 1}, call_id=f"call_{i}")])
    model.enqueue([assistant_message("done")])
    sagacity = Sagacity(InMemoryJournal())
    result = await sagacity.run(Agent(name="bench", model=model, tools=[reserve]), "go", max_turns=60)
    entries = await sagacity.journal.entries(result.saga_id)
    await sagacity.aclose()
    assert len(entries) == 100, len(entries)
    assert any(FENCE_KEY in (e.payload or {}) for e in entries)
    return entries


def resealed(model: list[JournalEntry], saga_id: str, tagger: Any, journal_id: str) -> list[tuple[Any, ...]]:
    """``model``'s entries sealed again under ``saga_id`` (same payloads, fences and times), its
    SAGA_OPENED naming ``journal_id`` (the journal written to: a saga of another journal's id
    fails as a copy, ``core.identity``), tagged as a writer of that journal tags them."""
    rows, prev = [], "0" * 64
    seal = SagaSeal(journal_id, [])
    for e in model:
        payload = e.payload
        if e.phase is Phase.SAGA_OPENED:
            payload = {**payload, JOURNAL_ID_KEY: journal_id}
        entry = seal_entry(saga_id=saga_id, seq=e.seq, phase=e.phase, tool=e.tool, call_id=e.call_id,
                           write_key=e.write_key, payload=payload, recorded_at=e.recorded_at,
                           prev_hash=prev)
        if tagger is not None:
            entry = BoundTagger(tagger, seal, opening=e.seq == 1).tag_entry(entry)
        prev = entry.hash
        rows.append(tuple(getattr(entry, c) if c != "phase" else entry.phase.value for c in _COLUMNS))
    return rows


def build_sqlite(path: Path, model: list[JournalEntry], sagas: int, tagger: Any) -> None:
    if path.exists():
        return
    journal_id = asyncio.run(_journal_id(SqliteJournal(path)))
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    with conn:
        for i in range(sagas):
            conn.executemany(f"INSERT INTO sagacity_journal ({', '.join(_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(_COLUMNS))})",
                             resealed(model, f"saga-{i:05d}", tagger, journal_id))
    conn.close()


async def _journal_id(journal: Any) -> str:
    """The id of ``journal`` (made with its tables), then closed."""
    try:
        found = await journal_id_of(journal)
    finally:
        await journal.close()
    assert found is not None
    return found


def build_pg(schema: str, model: list[JournalEntry], sagas: int) -> str:
    import psycopg

    from sagacity_agents.backends.postgres.journal import PostgresJournal
    from sagacity_agents.backends.postgres.migrations import migrate

    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{schema}"')
    uri = f"{PG}{'&' if '?' in PG else '?'}options=-csearch_path%3D{schema}"
    asyncio.run(migrate(uri))
    journal_id = asyncio.run(_journal_id(PostgresJournal(uri)))
    with psycopg.connect(uri) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY sagacity_journal ({', '.join(_COLUMNS)}) FROM STDIN") as copy:
            for i in range(sagas):
                for row in resealed(model, f"saga-{i:05d}", None, journal_id):
                    copy.write_row(row)
        conn.execute("ANALYZE sagacity_journal")
    return uri


async def timed_verify(journal: Any, evidence: Evidence | None) -> tuple[float, float, int]:
    start, cpu = time.perf_counter(), time.process_time()
    results = await verify_sagas(journal, evidence=evidence)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    bad = [r for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"{len(bad)} sagas do not verify: {bad[0]}")
    return elapsed, cpu, sum(r.entries for r in results)


def best_rate(make: Any, evidence: Any, repeat: int) -> tuple[float, int, float]:
    """(entries/s of the fastest run by the wall clock, entries, entries/s by that run's CPU
    time: on a loaded machine the second says what the code costs, the first what it got)."""

    async def once() -> tuple[float, float, int]:
        journal = make()
        try:
            # A fresh Evidence per run: its tag cache would spare the later runs the signatures.
            return await timed_verify(journal, evidence() if evidence is not None else None)
        finally:
            await journal.close()

    runs = [asyncio.run(once()) for _ in range(repeat)]
    elapsed, cpu, n = min(runs)
    return n / elapsed, n, n / cpu


def floors_sqlite(path: Path) -> tuple[float, float]:
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM sagacity_journal ORDER BY saga_id, seq").fetchall()
    select = len(rows) / (time.perf_counter() - start)
    start = time.perf_counter()
    for row in rows:
        hashlib.sha256(row[9]).hexdigest()
    sha = len(rows) / (time.perf_counter() - start)
    conn.close()
    return select, sha


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sagas", type=int, default=2000)
    parser.add_argument("--keyring-sagas", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "sagacity-verify-bench"))
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args()
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    model = asyncio.run(template())
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {os.getloadavg()}")

    plain = work / f"plain-{args.sagas}.db"
    build_sqlite(plain, model, args.sagas, None)
    select, sha = floors_sqlite(plain)
    rate, n, cpu = best_rate(lambda: SqliteJournal(plain), None, args.repeat)
    print(f"sqlite     no keyring : {rate / 1e3:7.1f} k entries/s ({n} entries; target >= 150 k/s; "
          f"by CPU time {cpu / 1e3:.1f} k/s)   [ordered SELECT {select / 1e3:.0f} k/s, SHA-256 {sha / 1e3:.0f} k/s]")

    keys = work / "keys"
    if not (keys / "bench.pub").exists():
        generate_key(keys, "bench")
    keyring = Keyring.load(keys)
    tagged = work / f"tagged-{args.keyring_sagas}.db"
    build_sqlite(tagged, model, args.keyring_sagas, EntryTagger(keyring))
    rate_k, n_k, _ = best_rate(lambda: SqliteJournal(tagged), lambda: Evidence(keyring=keyring), args.repeat)
    rate_c, _, _ = best_rate(lambda: SqliteJournal(tagged), None, args.repeat)
    print(f"sqlite     keyring    : {rate_k / 1e3:7.1f} k entries/s ({n_k} tagged entries; "
          f"the same file without the keyring {rate_c / 1e3:.1f} k/s)")

    if not args.no_pg:
        try:
            from sagacity_agents.backends.postgres.journal import PostgresJournal

            uri = build_pg(f"sagacity_verify_bench_{os.getpid()}", model, args.sagas)
        except Exception as exc:  # noqa: BLE001 - no server: say so, go on
            print(f"postgresql: skipped ({exc})")
        else:
            try:
                rate, n, cpu = best_rate(lambda: PostgresJournal(uri), None, args.repeat)
                print(f"postgresql no keyring : {rate / 1e3:7.1f} k entries/s ({n} entries; target >= 100 k/s; "
                      f"by this process's CPU time {cpu / 1e3:.1f} k/s)")
            finally:
                import psycopg

                with psycopg.connect(PG, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "sagacity_verify_bench_{os.getpid()}" CASCADE')
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

"""How fast every public way to verify a journal reads (issues 22 and 37): entries per second.

A journal of ``--sagas`` sagas of 100 entries each (SAGA_OPENED, RUN_STARTED, 48 calls as INTENT
+ EXECUTED under the run's fence, RUN_ENDED, SAGA_CLOSED: the shapes a real run writes, taken
from one run of the library and re-sealed under each saga id and the journal's id) is written
once to a SQLite file and, when the server is reachable, to a PostgreSQL schema of its own.
Then each entry point is timed on its own over the whole journal, best of ``--repeat``, by the
wall clock and by this process's CPU time (all its threads):

* ``verify_journal``: ``sagacity_agents.evidence.verify_journal`` (the chain and anchors);
* ``Sagacity.verify``: the facade's (chain, anchors, structure; the caller built untimed);
* ``Evidence.verify_all``: ``sagacity_agents.evidence.Evidence().verify_all``;
* ``verify_sagas``: ``core.evidence.verify_sagas``, the engine the three above and the CLI share;
* ``CLI in process``: ``sagacity journal verify --db ...`` through click's ``CliRunner`` (opening
  the journal and printing one line per saga included, no interpreter start-up);
* ``CLI subprocess``: ``python -m sagacity_agents journal verify`` in a subprocess, minus the
  best time of ``python -m sagacity_agents --help`` (the interpreter's start-up and the CLI's
  imports), output to a pipe.

Beside them an ordered SELECT of the same rows and SHA-256 of the same bytes, the floors they
cannot beat. With ``--keyring-sagas`` sagas (tagged by an Ed25519 keyring at write time, bound to
the journal's id) the keyring's rate through ``verify_sagas``, ``Sagacity.verify`` and the CLI is
printed beside the rate of bare Ed25519 verifies of the same entries' tags (the statements built
untimed), on one thread and on ``os.cpu_count()`` threads (``cryptography`` releases the GIL while
it verifies), with the ratio to the better of the two.

Targets (issue 37): >= 150 k entries/s without a keyring from the 200 k-entry SQLite file and
>= 100 k/s from PostgreSQL through every entry point; with a keyring >= 0.8x the bare Ed25519
rate on the same cores. The load average is printed: on a busy machine the wall-clock figures
are low (the CPU-time ones say what the code costs).

Usage::

    python bench/verify_speed.py [--sagas 2000] [--keyring-sagas 200] [--repeat 3] [--no-pg] [--no-cli]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sagacity_agents import Sagacity
from sagacity_agents.backends import InMemoryJournal, SqliteJournal
from sagacity_agents.core.authenticity import EntryTagger, TagCache, prove_tags
from sagacity_agents.core.entries import JournalEntry, Phase, seal_entry
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.identity import JOURNAL_ID_KEY, BoundTagger, SagaSeal, derivation_of, journal_id_of
from sagacity_agents.core.journal import FENCE_KEY
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.evidence import verify_journal

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



async def _timed(journal: Any, call: Any) -> tuple[float, float, int]:
    """(wall s, CPU s, entries) of one ``call(journal)`` over the whole journal (every saga ok)."""
    start, cpu = time.perf_counter(), time.process_time()
    results = await call(journal)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    bad = [r for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"{len(bad)} sagas do not verify: {bad[0]}")
    return elapsed, cpu, sum(r.entries for r in results)


def best_rate(make: Any, prepare: Any, repeat: int) -> tuple[float, int, float]:
    """(entries/s of the fastest run by the wall clock, entries, entries/s by that run's CPU
    time: on a loaded machine the second says what the code costs, the first what it got).
    ``prepare(journal)`` builds the caller untimed and returns the call to time."""

    async def once() -> tuple[float, float, int]:
        journal = make()
        try:
            # A fresh caller per run: an Evidence's tag cache would spare later runs the signatures.
            return await _timed(journal, prepare(journal))
        finally:
            await journal.close()

    runs = [asyncio.run(once()) for _ in range(repeat)]
    elapsed, cpu, n = min(runs)
    return n / elapsed, n, n / cpu


def entry_points(keyring: Keyring | None) -> dict[str, Any]:
    """Name -> ``prepare(journal)`` giving the call to time (module doc)."""
    points: dict[str, Any] = {}
    if keyring is None:
        points["verify_journal"] = lambda j: verify_journal
    points["Sagacity.verify"] = lambda j: _facade(j, keyring)
    if keyring is None:
        points["Evidence.verify_all"] = lambda j: Evidence().verify_all
    points["verify_sagas"] = lambda j: (lambda journal: verify_sagas(journal, evidence=Evidence(keyring=keyring)))
    return points


def _facade(journal: Any, keyring: Keyring | None) -> Any:
    sagacity = Sagacity(journal, keyring=keyring)
    return lambda _journal: sagacity.verify()


def cli_in_process(db: str, options: list[str], repeat: int, entries: int) -> tuple[float, float]:
    """(entries/s, entries/s by CPU time) of ``sagacity journal verify`` run by click's
    CliRunner, the fastest of ``repeat`` runs by the wall clock."""
    from click.testing import CliRunner

    from sagacity_agents.cli import cli

    runs = []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        outcome = CliRunner().invoke(cli, ["journal", "verify", "--db", db, *options])
        runs.append((time.perf_counter() - start, time.process_time() - cpu))
        if outcome.exit_code != 0:
            raise RuntimeError(f"journal verify exited {outcome.exit_code}: {outcome.output[-500:]}")
    elapsed, cpu = min(runs)
    return entries / elapsed, entries / cpu


def cli_subprocess(db: str, options: list[str], repeat: int, entries: int) -> tuple[float, float, float]:
    """(entries/s of ``python -m sagacity_agents journal verify`` minus the start-up, the same by
    the children's CPU time minus the start-up's, the start-up in s): each the fastest of
    ``repeat`` runs by the wall clock."""

    def best(args: list[str]) -> tuple[float, float]:
        runs = []
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "sagacity_agents", *args], check=True,
                           stdout=subprocess.DEVNULL, env={**os.environ, "SAGACITY_OTEL": "0"})
            elapsed = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            runs.append((elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime))
        return min(runs)

    startup, startup_cpu = best(["--help"])
    elapsed, cpu = best(["journal", "verify", "--db", db, *options])
    return (entries / max(elapsed - startup, 1e-9), entries / max(cpu - startup_cpu, 1e-9), startup)


def report(backend: str, make: Any, db: str, target: int, args: argparse.Namespace) -> None:
    """Time every entry point on one journal (no keyring) and print one line each."""
    print(f"{backend}: target >= {target} k entries/s through every entry point")
    n = 0
    for name, prepare in entry_points(None).items():
        rate, n, cpu = best_rate(make, prepare, args.repeat)
        print(f"  {name:22s}: {rate / 1e3:7.1f} k entries/s  (by CPU time {cpu / 1e3:6.1f} k/s; {n} entries)")
    if args.no_cli:
        return
    rate, cpu = cli_in_process(db, [], args.repeat, n)
    print(f"  {'CLI in process':22s}: {rate / 1e3:7.1f} k entries/s  (by CPU time {cpu / 1e3:6.1f} k/s; "
          "click CliRunner: journal opened, one line printed per saga)")
    rate, cpu, startup = cli_subprocess(db, [], args.repeat, n)
    print(f"  {'CLI subprocess':22s}: {rate / 1e3:7.1f} k entries/s  (by CPU time {cpu / 1e3:6.1f} k/s; "
          f"minus the start-up, `python -m sagacity_agents --help`: {startup * 1e3:.0f} ms)")


def bare_ed25519(path: Path, keyring: Keyring, threads: int) -> tuple[int, float, float]:
    """(tags, verifies/s on one thread, verifies/s on ``threads`` threads) of the tags of the
    journal at ``path``: the statements and keys built first, untimed (``TagCache.unproven``),
    then only ``Ed25519PublicKey.verify`` timed (``core.authenticity.prove_tags``)."""

    async def claims() -> list[Any]:
        journal = SqliteJournal(path)
        try:
            journal_id = await journal_id_of(journal)
            found: list[Any] = []
            for sid in await journal.saga_ids():
                entries = await journal.entries(sid)
                found += TagCache().unproven(entries, keyring, derivation_of(entries, journal_id))
            return found
        finally:
            await journal.close()

    work = asyncio.run(claims())
    start = time.perf_counter()
    assert len(prove_tags(work)) == len(work)
    one = len(work) / (time.perf_counter() - start)
    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        assert sum(len(p) for p in pool.map(prove_tags, [work[i::threads] for i in range(threads)])) == len(work)
        many = len(work) / (time.perf_counter() - start)
    return len(work), one, many


def report_keyring(work: Path, model: list[JournalEntry], args: argparse.Namespace) -> None:
    """The keyring's rates beside bare Ed25519 verifies of the same tags on the same cores."""
    keys = work / "keys"
    if not (keys / "bench.pub").exists():
        generate_key(keys, "bench")
    keyring = Keyring.load(keys)
    tagged = work / f"tagged-{args.keyring_sagas}-v2.db"
    build_sqlite(tagged, model, args.keyring_sagas, EntryTagger(keyring))
    cores = os.cpu_count() or 1
    tags, one, many = bare_ed25519(tagged, keyring, cores)
    bare = max(one, many)
    print(f"sqlite with a keyring ({tags} tagged entries; os.cpu_count() = {cores}): bare Ed25519 "
          f"{one / 1e3:.2f} k/s on 1 thread, {many / 1e3:.2f} k/s on {cores} threads; target >= 0.8x "
          f"{bare / 1e3:.2f} k/s = {0.8 * bare / 1e3:.2f} k/s")
    for name, prepare in entry_points(keyring).items():
        rate, _, cpu = best_rate(lambda: SqliteJournal(tagged), prepare, args.repeat)
        print(f"  {name:22s}: {rate / 1e3:7.2f} k entries/s = {rate / bare:.2f}x bare  "
              f"(by CPU time {cpu / 1e3:.2f} k/s)")
    if not args.no_cli:
        rate, _ = cli_in_process(str(tagged), ["--keyring", str(keys)], args.repeat, tags)
        print(f"  {'CLI in process':22s}: {rate / 1e3:7.2f} k entries/s = {rate / bare:.2f}x bare")
        rate, _, _ = cli_subprocess(str(tagged), ["--keyring", str(keys)], args.repeat, tags)
        print(f"  {'CLI subprocess':22s}: {rate / 1e3:7.2f} k entries/s = {rate / bare:.2f}x bare "
              "(minus the start-up)")


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
    parser.add_argument("--no-cli", action="store_true", help="leave the CLI out (in process and subprocess)")
    args = parser.parse_args()
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    model = asyncio.run(template())
    print(f"python {sys.version.split()[0]}, os.cpu_count() = {os.cpu_count()}, load average {os.getloadavg()}")

    plain = work / f"plain-{args.sagas}-v2.db"
    build_sqlite(plain, model, args.sagas, None)
    select, sha = floors_sqlite(plain)
    print(f"floors: ordered SELECT {select / 1e3:.0f} k rows/s, SHA-256 {sha / 1e3:.0f} k/s")
    report("sqlite", lambda: SqliteJournal(plain), str(plain), 150, args)
    report_keyring(work, model, args)

    if not args.no_pg:
        schema = f"sagacity_verify_bench_{os.getpid()}"
        try:
            from sagacity_agents.backends.postgres.journal import PostgresJournal

            uri = build_pg(schema, model, args.sagas)
        except Exception as exc:  # noqa: BLE001 - no server: say so, go on
            print(f"postgresql: skipped ({exc})")
        else:
            try:
                report("postgresql", lambda: PostgresJournal(uri), uri, 100, args)
            finally:
                import psycopg

                with psycopg.connect(PG, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

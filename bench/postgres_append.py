"""Appends per second on PostgreSQL: bare INSERT+COMMIT, the Java original's design, and ours.

One run, one server, one process (asyncio; one worker = one task on its own connection; pools
sized to the number of workers), in a schema of its own that is dropped at the end. Designs:

    bare      INSERT + COMMIT of an entry, no ordering at all (the floor: one commit per append)
    original  the Java original as design.md describes it: in a transaction, read the tail with
              ``SELECT ... ORDER BY seq DESC LIMIT 1 FOR UPDATE``, insert seq + 1, commit; on a
              unique violation (23505) roll back and retry, 50 attempts, no backoff; an append
              whose 50 attempts all collide fails
    ours      ``PostgresJournal.append``: with no other append of its own to the saga in flight,
              a plain INSERT of the entry sealed on the tail it stored last (UNIQUE (saga, seq)
              refuses it if another writer appended since); otherwise one statement: advisory
              lock on the saga, then an INSERT ... SELECT that reads the tail and joins the
              entry's bytes; commit. Workers share one journal here, as tasks of one process do

each at 1, 16 and 64 workers on one saga, and 16 workers over 16 sagas (one each), for
``--seconds`` per cell, the three designs taking turns (``--slices`` turns each) so that a change
in the shared disk's speed during the run hits them alike. Reported: successful appends per wall second, retries, failed appends,
and for ``ours`` a check that every saga's chain is 1..N with no gap and verifies.

Then (after a ``CHECKPOINT``, so that the cells' writes do not bleed into it) the per-call
overhead of a wrapped tool with the PostgreSQL journal: the same scripted agent run (N tool
calls) bare and under ``Sagacity(PostgresJournal)``, interleaved round by round; overhead per
call = the median over rounds of (wrapped - bare of the same round) / N, the saga's own entries
included. It is a multiple of one bare INSERT+COMMIT of the same run, measured the same way: the
same script with one bare INSERT+COMMIT (a prebuilt row, the baseline's own statement) in every
call, minus the bare script of the same round, per call. That commit's latency (timed around the
statement inside the tool) is reported beside it: on a host where the agent's turn runs slower
after each wait (seen on a VM with 2 shared vCPUs; ``bench/idle_cost.py`` measures it), a
commit costs the run more than its latency, and a ratio against the latency would rate even one
bare commit per call above 1x. Measured with durable outcome commits (the default) and with
``fast_outcomes=True``, beside two references: the in-memory journal (the saga's own machinery)
and the floor of any design that makes one durable commit per call (the in-memory journal plus
one bare INSERT+COMMIT before each INTENT). Every round runs each of them once, in an order drawn
afresh each round (``--seed``): on a shared host, what ran just before a run changes its speed.
Ratios come with a 95 % interval (the rounds resampled) and, beside the paired estimate, the
difference of the medians; the raw run times and orders are in the JSON. The throughput cells'
designs also run in a fresh order each turn (``cell_orders`` in the JSON). Targets compare the
unrounded figures (rounding is for printing only: a ratio of 2.50004 is not "<= 2.5").

Usage::

    python bench/postgres_append.py [--db postgresql://postgres@127.0.0.1:5432/test]
        [--seconds 3] [--slices 3] [--workers 1,16,64] [--calls 20] [--rounds 50] [--seed 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import secrets
import statistics
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from agents import Runner, function_tool, set_tracing_disabled

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fair_order import round_orders  # noqa: E402
from overhead import _agent, _bare_tool, _wrapped_tool, machine_facts  # noqa: E402

from sagacity_agents import Sagacity, SagaStatus  # noqa: E402
from sagacity_agents.backends import Phase, PostgresJournal  # noqa: E402
from sagacity_agents.evidence import verify_journal  # noqa: E402
from sagacity_agents.backends.memory.journal import InMemoryJournal  # noqa: E402
from sagacity_agents.core.journal import AppendRequest, as_request, next_entry, utc_stamp  # noqa: E402
from sagacity_agents.backends.postgres.migrations import migrate  # noqa: E402

DESIGNS = ("bare", "original", "ours")
ATTEMPTS = 50
_COLUMNS = "saga_id, seq, phase, tool, call_id, write_key, recorded_at, prev_hash, hash, canonical"
_INSERT = f"INSERT INTO {{table}} ({_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
_BENCH_TABLES = """
CREATE TABLE bench_bare (LIKE sagacity_journal INCLUDING DEFAULTS);
ALTER TABLE bench_bare DROP COLUMN id;
CREATE TABLE bench_original (
    saga_id text NOT NULL, seq bigint NOT NULL, phase text NOT NULL, tool text, call_id text,
    write_key text NOT NULL, recorded_at text NOT NULL, prev_hash text NOT NULL,
    hash text NOT NULL, canonical bytea NOT NULL,
    PRIMARY KEY (saga_id, seq), UNIQUE (saga_id, write_key)
);
"""


def _row(entry: Any) -> tuple[Any, ...]:
    return (entry.saga_id, entry.seq, entry.phase.value, entry.tool, entry.call_id,
            entry.write_key, entry.recorded_at, entry.prev_hash, entry.hash, entry.canonical)


def _request(saga_id: str, key: str) -> AppendRequest:
    return AppendRequest.build(saga_id, Phase.EXECUTED, write_key=key, tool="reserve",
                               call_id=key, payload={"result": "ok", "qty": 1})


class Cell:
    """Counters of one (design, workers, sagas) run."""

    def __init__(self) -> None:
        self.appends = 0
        self.retries = 0
        self.failed = 0


async def _bare_worker(conn: Any, saga_id: str, worker: int, stop: float, cell: Cell) -> None:
    n = 0
    insert = _INSERT.format(table="bench_bare")
    while time.perf_counter() < stop:
        n += 1
        entry = next_entry(_request(saga_id, f"{worker}-{n}"), None, utc_stamp())
        await conn.execute(insert, _row(entry))  # autocommit: INSERT + COMMIT
        cell.appends += 1


async def _original_worker(conn: Any, saga_id: str, worker: int, stop: float, cell: Cell) -> None:
    n = 0
    insert = _INSERT.format(table="bench_original")
    while time.perf_counter() < stop:
        n += 1
        request = _request(saga_id, f"{worker}-{n}")
        for attempt in range(1, ATTEMPTS + 1):
            try:
                async with conn.transaction():
                    cur = await conn.execute(
                        "SELECT seq, hash, phase FROM bench_original WHERE saga_id = %s "
                        "ORDER BY seq DESC LIMIT 1 FOR UPDATE",
                        (saga_id,),
                    )
                    tail = await cur.fetchone()
                    entry = next_entry(request, tail, utc_stamp())
                    await conn.execute(insert, _row(entry))
                cell.appends += 1
                break
            except psycopg.errors.UniqueViolation:
                if attempt == ATTEMPTS:
                    cell.failed += 1
                else:
                    cell.retries += 1


async def _ours_worker(journal: PostgresJournal, saga_id: str, worker: int, stop: float,
                       cell: Cell) -> None:
    n = 0
    while time.perf_counter() < stop:
        n += 1
        try:
            await journal.append(saga_id, Phase.EXECUTED, write_key=f"{worker}-{n}",
                                 tool="reserve", call_id=f"{worker}-{n}",
                                 payload={"result": "ok", "qty": 1})
            cell.appends += 1
        except Exception:  # noqa: BLE001 - counted, reported
            cell.failed += 1


async def run_cell(uri: str, design: str, workers: int, sagas: int, seconds: float,
                   tag: str) -> dict[str, Any]:
    """Run one design with ``workers`` workers spread over ``sagas`` sagas for ``seconds``."""
    cell = Cell()
    saga_ids = [f"{tag}-{design}-{workers}x{sagas}-{i}" for i in range(sagas)]
    journal = None
    conns: list[Any] = []
    try:
        if design == "ours":
            journal = PostgresJournal(uri, min_size=workers, max_size=workers, pool_timeout=60)
            await journal.database.pool()  # open (and fill) the pool before timing
        else:
            conns = [await psycopg.AsyncConnection.connect(uri, autocommit=True)
                     for _ in range(workers)]
        start = time.perf_counter()
        stop = start + seconds
        tasks = []
        for w in range(workers):
            saga_id = saga_ids[w % sagas]
            if design == "bare":
                tasks.append(_bare_worker(conns[w], saga_id, w, stop, cell))
            elif design == "original":
                tasks.append(_original_worker(conns[w], saga_id, w, stop, cell))
            else:
                assert journal is not None
                tasks.append(_ours_worker(journal, saga_id, w, stop, cell))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - start
        result: dict[str, Any] = {
            "appends": cell.appends, "retries": cell.retries, "failed": cell.failed,
            "wall_s": wall, "per_s": cell.appends / wall,  # unrounded: targets compare these
        }
        if journal is not None:  # every chain 1..N, no gap, verifies; nothing lost
            stored = 0
            for sid in saga_ids:
                entries = await journal.entries(sid)
                if [e.seq for e in entries] != list(range(1, len(entries) + 1)):
                    raise RuntimeError(f"gap or disorder in {sid}")
                stored += len(entries)
                (verified,) = await verify_journal(journal, sid)
                if not verified.ok:
                    raise RuntimeError(f"the chain of {sid} does not verify: {verified}")
            result["lost"] = cell.appends - stored
        return result
    finally:
        if journal is not None:
            await journal.close()
        for conn in conns:
            await conn.close()


class _OneCommitJournal(InMemoryJournal):
    """The floor of any journal that makes each call's INTENT durable: the in-memory journal plus
    one bare INSERT+COMMIT (the baseline's own statement) before each INTENT, nothing else."""

    def __init__(self, conn: Any) -> None:
        super().__init__()
        self._conn, self._insert = conn, _INSERT.format(table="bench_bare")
        # Prebuilt, as the commit run's row is: the two measure the same statement.
        self._row = _row(next_entry(_request("floor", "floor"), None, utc_stamp()))

    async def append(self, saga_id: Any, phase: Phase | None = None, **fields: Any) -> Any:
        request = as_request(saga_id, phase, fields)
        if request.phase is Phase.INTENT:
            await self._conn.execute(self._insert, self._row)
        return await super().append(request)


COMMIT_RUN = "bare + 1 bare INSERT+COMMIT/call"
"""The bare script with one bare INSERT+COMMIT in every tool call: the target's denominator."""
BOOTSTRAP = 2000
"""Resamples of the rounds for the 95 % intervals of the ratios."""


async def per_call_overhead(uri: str, calls: int, rounds: int, seed: int = 1) -> dict[str, Any]:
    """Run times of the bare script, the bare script with one bare INSERT+COMMIT per call, and the
    wrapped script under each journal (durable and fast outcomes, and two references), all in
    every round, in an order drawn afresh each round (``seed``); returns the raw times and the
    per-call figures (:func:`overhead_figures`)."""
    set_tracing_disabled(True)
    bare_tool, wrapped_tool = _bare_tool(), _wrapped_tool()
    raw = await psycopg.AsyncConnection.connect(uri, autocommit=True)
    floor_conn = await psycopg.AsyncConnection.connect(uri, autocommit=True)
    sagacities = {
        "postgres": Sagacity(PostgresJournal(uri)),
        "postgres-fast-outcomes": Sagacity(PostgresJournal(uri, fast_outcomes=True)),
        # The saga's own machinery with no storage cost: what of the overhead is not PostgreSQL.
        "in-memory (reference)": Sagacity(InMemoryJournal()),
        # What one durable commit per call costs a run on this host (the floor of the design).
        "in-memory + 1 bare commit/call (floor)": Sagacity(_OneCommitJournal(floor_conn)),
    }
    times: dict[str, list[float]] = {"bare": [], COMMIT_RUN: [], **{k: [] for k in sagacities}}
    # One bare INSERT+COMMIT of the same run, measured two ways. Its cost to a run (the target's
    # denominator): the same script with that commit in every call, minus the bare script, per
    # call, exactly as the journals' overhead is measured. Its latency: timed around the
    # statement inside that tool, one per call between model turns, as the journal's commits
    # happen (back-to-back commits flush faster on some disks and would flatter it).
    latencies: list[list[float]] = []  # per timed commit run: its calls' latencies
    insert = _INSERT.format(table="bench_bare")
    row = _row(next_entry(_request("overhead", "commit"), None, utc_stamp()))  # built outside the runs

    @function_tool
    async def reserve(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""  # as bench/overhead.py's bare tool, + the commit
        start = time.perf_counter()
        await raw.execute(insert, row)
        latencies[-1].append(time.perf_counter() - start)
        return f"R-{item}-{qty}"

    async def one_run(name: str) -> float:
        if name in ("bare", COMMIT_RUN):
            if name == COMMIT_RUN:
                latencies.append([])
            start = time.perf_counter()
            await Runner.run(_agent(bare_tool if name == "bare" else reserve, calls), "go",
                             max_turns=calls + 5)
            return time.perf_counter() - start
        start = time.perf_counter()
        saga = await sagacities[name].run(_agent(wrapped_tool, calls), "go", max_turns=calls + 5)
        elapsed = time.perf_counter() - start
        if saga.status is not SagaStatus.COMPLETED:
            raise RuntimeError(f"{name}: {saga.status} {saga.exception!r}")
        return elapsed

    orders = []
    try:
        # What ran just before a run changes its speed on a shared host: a fresh order each
        # round (fair_order), so that no run always follows the same one.
        for round_no, order in enumerate(round_orders(list(times), rounds + 1, seed)):  # 0 warms up
            for name in order:
                elapsed = await one_run(name)
                if round_no:
                    times[name].append(elapsed)
            if round_no:
                orders.append(order)
            else:
                latencies.clear()
    finally:
        for sagacity in sagacities.values():
            await sagacity.aclose()
        await raw.close()
        await floor_conn.close()
    return {
        "calls": calls, "rounds": rounds, "seed": seed,
        **overhead_figures(times, latencies, calls, list(sagacities), random.Random(seed)),
        "raw": {"order": orders, "run_ms": {k: [round(v * 1000, 3) for v in series]
                                            for k, series in times.items()},
                "commit_latency_ms": [[round(v * 1000, 3) for v in run] for run in latencies]},
    }


def overhead_figures(times: dict[str, list[float]], latencies: list[list[float]], calls: int,
                     journals: list[str], rng: random.Random) -> dict[str, Any]:
    """Per-call figures (ms) and ratios from the run times (s) of every round.

    Overhead of a run = the median over rounds of (its time - the bare run's of the same round)
    / ``calls``, for the journals and for the commit run alike (the paired estimate); beside it,
    the difference of the medians. The ratios divide a journal's overhead by the commit run's
    (its cost to a run) and by the commit's latency (the median over rounds of each commit run's
    mean latency per call); 95 % intervals resample the rounds (:data:`BOOTSTRAP` times).
    """
    n = len(times["bare"])

    def paired(name: str, rounds_: Sequence[int]) -> float:
        return statistics.median(times[name][i] - times["bare"][i] for i in rounds_) / calls

    every = range(n)
    cost = paired(COMMIT_RUN, every)
    latency = statistics.median(statistics.fmean(run) for run in latencies)
    one_commit = statistics.median(v for run in latencies for v in run)
    medians = {k: statistics.median(v) for k, v in times.items()}
    per_call = {k: paired(k, every) for k in journals}
    interval: dict[str, list[float]] = {k: [] for k in journals}
    for _ in range(BOOTSTRAP):
        sample = [rng.randrange(n) for _ in every]
        resampled_cost = paired(COMMIT_RUN, sample)
        for k in journals:
            interval[k].append(paired(k, sample) / resampled_cost if resampled_cost > 0 else math.inf)

    def ms(value: float) -> float:
        return round(value * 1000, 3)

    def bounds(values: list[float]) -> list[float]:
        ordered = sorted(values)
        return [ordered[int(0.025 * len(ordered))],
                ordered[min(int(0.975 * len(ordered)), len(ordered) - 1)]]

    return {
        "bare_commit_cost_ms": ms(cost),
        "bare_commit_cost_delta_medians_ms": ms((medians[COMMIT_RUN] - medians["bare"]) / calls),
        "bare_commit_ms": ms(latency),
        "bare_commit_median_one_ms": ms(one_commit),
        "median_run_ms": {k: ms(v) for k, v in medians.items()},
        "per_call_overhead_ms": {k: ms(v) for k, v in per_call.items()},
        "per_call_overhead_delta_medians_ms": {
            k: ms((medians[k] - medians["bare"]) / calls) for k in journals
        },
        # The target's measure: both sides are what they add to the same script's run, per call.
        # A commit cannot cost a run less than its own latency: then the figure is not resolved.
        "cost_resolved": cost >= latency,
        "overhead_x_bare_commit_cost": {
            k: v / cost if cost > 0 else math.inf for k, v in per_call.items()
        },
        "overhead_x_bare_commit_cost_95": {k: bounds(v) for k, v in interval.items()},
        "overhead_x_bare_commit_cost_delta_medians": {
            k: (medians[k] - medians["bare"]) / (medians[COMMIT_RUN] - medians["bare"])
            if medians[COMMIT_RUN] > medians["bare"] else math.inf
            for k in journals
        },
        # Against the commit's latency alone (the mean per call; the figure was first reported
        # against the median single commit, kept below): on a host where a wait slows the run
        # beyond its own length, this rates even the floor (one bare commit per call and nothing
        # else) above 1x.
        "overhead_x_bare_commit": {k: v / latency for k, v in per_call.items()},
        "overhead_x_bare_commit_median_one": {
            k: v / one_commit for k, v in per_call.items()
        },
    }


@contextlib.asynccontextmanager
async def scratch_schema(uri: str) -> AsyncIterator[str]:
    """A fresh schema on the server at ``uri``, migrated; yields a URI that works in it, and drops
    it (with everything in it) afterwards."""
    schema = f"sagacity_bench_{secrets.token_hex(4)}"
    sep = "&" if "?" in uri else "?"
    scoped = f"{uri}{sep}options={urllib.parse.quote(f'-csearch_path={schema}')}"
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as admin:
        await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        await migrate(scoped)
        yield scoped
    finally:
        async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as admin:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def run_benchmark(uri: str, *, seconds: float, workers: list[int], calls: int,
                        rounds: int, slices: int = 3, progress: Any = None,
                        seed: int = 1) -> dict[str, Any]:
    """The whole benchmark in a fresh schema of the server at ``uri`` (dropped afterwards)."""
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as admin:
        server_version = (await (await admin.execute("SHOW server_version")).fetchone())[0]
    async with scratch_schema(uri) as scoped:
        async with await psycopg.AsyncConnection.connect(scoped, autocommit=True) as conn:
            await conn.execute(_BENCH_TABLES)
        shapes = [(w, 1) for w in workers] + [(16, 16)]
        cells: dict[str, dict[str, Any]] = {}
        cell_orders: dict[str, list[list[str]]] = {}
        tag = secrets.token_hex(3)
        for shape_no, (w, s) in enumerate(shapes):
            # Designs interleaved in `slices` turns of seconds/slices each, so a change in the
            # shared disk's speed during the run hits every design alike, in an order drawn
            # afresh each turn (fair_order): no design always follows the same one.
            orders = cell_orders[f"{w}x{s}"] = round_orders(DESIGNS, slices, seed * 1000 + shape_no)
            for turn, order in enumerate(orders):
                for design in order:
                    if progress:
                        progress(f"{design} {w} worker(s) x {s} saga(s), turn {turn + 1}/{slices}")
                    part = await run_cell(scoped, design, w, s, seconds / slices, f"{tag}t{turn}")
                    total = cells.setdefault(f"{design}/{w}x{s}", {})
                    for key in ("appends", "retries", "failed", "wall_s", "lost"):
                        if key in part:
                            total[key] = total.get(key, 0) + part[key]
            for design in DESIGNS:
                total = cells[f"{design}/{w}x{s}"]
                total["per_s"] = total["appends"] / total["wall_s"]  # unrounded (printed rounded)
        # The cells' write burst must not bleed into the per-call rounds (a checkpoint flushing
        # it competes with their commits): start them from a checkpoint.
        async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as admin:
            try:
                await admin.execute("CHECKPOINT")
            except psycopg.errors.InsufficientPrivilege:
                pass  # a role without pg_checkpoint: measured as it is
        overhead = await per_call_overhead(scoped, calls, rounds, seed)
    facts = machine_facts()
    facts["postgres"] = server_version
    facts["psycopg"] = psycopg.__version__
    return {"machine": facts, "seconds": seconds, "slices": slices, "workers": workers,
            "cells": cells, "cell_orders": cell_orders,
            "overhead": overhead, "targets": targets(cells, workers, overhead)}


def targets(cells: dict[str, Any], workers: list[int], overhead: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, checked on this run's figures."""
    out: dict[str, Any] = {}
    top, one = max(workers), min(workers)
    ours, orig = cells[f"ours/{top}x1"], cells[f"original/{top}x1"]
    out[f"ours at {top} workers: nothing failed or lost"] = ours["failed"] == 0 and ours.get("lost") == 0
    out[f"ours >= 5x original at {top} workers"] = ours["per_s"] >= 5 * max(orig["per_s"], 1e-9)
    out[f"ours {one} worker(s) >= 70% of bare"] = (
        cells[f"ours/{one}x1"]["per_s"] >= 0.7 * cells[f"bare/{one}x1"]["per_s"]
    )
    for journal, label in (("postgres", "durable"), ("postgres-fast-outcomes", "fast outcomes")):
        out[f"per-call overhead <= 2.5x one bare INSERT+COMMIT's cost to the run ({label})"] = (
            overhead["cost_resolved"] and overhead["overhead_x_bare_commit_cost"][journal] <= 2.5
        )
        out[f"  ... and the upper end of its 95% interval too ({label})"] = (
            overhead["cost_resolved"] and overhead["overhead_x_bare_commit_cost_95"][journal][1] <= 2.5
        )
    for journal, label in (("postgres", "durable"), ("postgres-fast-outcomes", "fast outcomes")):
        out[f"(not the target's measure) <= 2.5x one bare commit's latency, mean per call ({label})"] = (
            overhead["overhead_x_bare_commit"][journal] <= 2.5
        )
        out[f"(the measure first reported) <= 2.5x the median single commit ({label})"] = (
            overhead["overhead_x_bare_commit_median_one"][journal] <= 2.5
        )
    return out


def print_report(result: dict[str, Any]) -> None:
    m = result["machine"]
    print(f"machine: {m.get('cpu', '?')}, {m['cpu_count']} cores, load {m.get('loadavg', '?')}; "
          f"PostgreSQL {m['postgres']}, psycopg {m['psycopg']}, Python {m['python']}")
    shapes = sorted({k.split("/")[1] for k in result["cells"]},
                    key=lambda s: (int(s.split("x")[1]), int(s.split("x")[0])))
    header = " | ".join(f"{int(s.split('x')[0])} w x {s.split('x')[1]} saga(s)" for s in shapes)
    print(f"| design | {header} |")
    print("| --- |" + " --- |" * len(shapes))
    for design in DESIGNS:
        row = []
        for s in shapes:
            c = result["cells"][f"{design}/{s}"]
            extra = []
            if c["retries"]:
                extra.append(f"{c['retries']:,} retries")
            if c["failed"]:
                extra.append(f"**{c['failed']:,} failed**")
            if "lost" in c:
                extra.append(f"{c['lost']} lost")
            row.append(f"{c['per_s']:,.0f}" + (f" ({', '.join(extra)})" if extra else ""))
        print(f"| {design} | " + " | ".join(row) + " |")
    o = result["overhead"]
    print(f"\nper-call overhead ({o['calls']} calls/run, paired median of {o['rounds']} rounds); "
          f"one bare INSERT+COMMIT costs the run {o['bare_commit_cost_ms']} ms per call "
          f"({o['bare_commit_cost_delta_medians_ms']} ms as a difference of medians; its latency "
          f"alone: {o['bare_commit_ms']} ms mean per call, {o['bare_commit_median_one_ms']} ms "
          "median single commit)")
    if not o["cost_resolved"]:
        print("  NOT RESOLVED: the commit cost the run less than its own latency (noise)")
    for k, v in o["per_call_overhead_ms"].items():
        low, high = o["overhead_x_bare_commit_cost_95"][k]
        print(f"  {k}: {v} ms per call = {o['overhead_x_bare_commit_cost'][k]:.2f}x one bare "
              f"commit's cost (95% {low:.2f}-{high:.2f}; "
              f"{o['overhead_x_bare_commit_cost_delta_medians'][k]:.2f}x by differences of "
              f"medians; {o['overhead_x_bare_commit'][k]:.2f}x its mean latency, "
              f"{o['overhead_x_bare_commit_median_one'][k]:.2f}x the median single commit)")
    print("\ntargets:")
    for k, v in result["targets"].items():
        print(f"  [{'met' if v else 'MISSED'}] {k}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="server URI (a schema of its own is created and dropped)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per cell (default 3)")
    parser.add_argument("--workers", default="1,16,64", help="worker counts on one saga")
    parser.add_argument("--slices", type=int, default=3,
                        help="turns the designs take in each cell, interleaved (default 3)")
    parser.add_argument("--calls", type=int, default=20, help="tool calls per overhead run")
    parser.add_argument("--rounds", type=int, default=50, help="overhead rounds (default 50)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the per-call rounds' run order and intervals (default 1)")
    parser.add_argument("--json", dest="json_out", default=None, help="write the results here")
    args = parser.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    result = asyncio.run(run_benchmark(
        args.db, seconds=args.seconds, workers=workers, calls=args.calls, rounds=args.rounds,
        slices=args.slices, seed=args.seed,
        progress=lambda what: print(f"  ... {what}", file=sys.stderr),
    ))
    print_report(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

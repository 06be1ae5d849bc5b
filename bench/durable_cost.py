"""``bench/overhead.py --durable``: the time a wrapped tool call adds BEYOND the one durable commit
it must make, per backend, decided on the median over interleaved rounds (issue 37's measure).

Each round runs, in an order rotated by one place every round (round r starts at job r mod n), with
``gc.collect()`` before every run and the run's own untimed agent built first:

* a 20-call scripted run (``agents.testing.ScriptedModel``, tracing off) bare (``Runner.run``),
  async tool and sync tool;
* the same under ``Sagacity.run``: in memory, SQLite ``synchronous=FULL`` (the default), and
  PostgreSQL (default settings) when the server answers; async and sync tools;
* twenty one-call runs of one saga on SQLite (``saga_id`` kept, closed by the last), and the same
  twenty one-call runs bare;
* ``agent-saga`` (the closest peer) when it is importable: its ``FileWAL`` (durable, the
  default) through its own OpenAI Agents adapter (``wrap_tool`` + ``saga_run``), async tool.

Between rounds, untimed for the runs: ``commits`` bare SQLite INSERT + COMMIT of a ~300-byte row
(WAL, FULL, this thread) and as many bare PostgreSQL autocommit INSERT round trips; the round's
bare commit is the median of those. Per round and variant:

    added per call  = (wrapped run - bare run of the same tool kind, same round) / calls
    beyond          = added per call - that round's bare commit        (SQLite, PostgreSQL)
    per turn        = (wrapped run - bare run) / bare run               (in memory)

Decided on: the median over the rounds of each per-round figure, with a distribution-free 95 %
interval from order statistics (the ranks k and n + 1 - k of the sorted rounds, k the largest
with P(Binomial(n, 1/2) < k) <= 0.025: coverage >= 95 %). The ratio to a bare commit is printed
both ways, labelled: the median of per-round ratios, and the ratio of the two medians.

Targets (issue 37), printed beside each figure: SQLite FULL beyond <= 450 us; PostgreSQL beyond
<= 500 us; in memory async <= 5 % and sync <= 6 % per turn, our own added cost <= 150 us per call;
twenty one-call runs <= 1.3x one twenty-call run's added cost per call (SQLite).
"""

from __future__ import annotations

import gc
import math
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

PG = os.environ.get("SAGACITY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
TARGETS = {
    "sqlite-full/beyond_us": 450.0,
    "postgres/beyond_us": 500.0,
    "memory/async/per_turn_pct": 5.0,
    "memory/sync/per_turn_pct": 6.0,
    "memory/async/added_us": 150.0,
    "memory/sync/added_us": 150.0,
    "one_call_runs/ratio": 1.3,
}


def interval(values: list[float], resamples: int = 2000, seed: int = 7) -> tuple[float, float, float]:
    """(median, low, high): the median and a 95 % bootstrap percentile interval for it (kept for
    ``bench/tau_replay.py``; this module decides on :func:`median_interval`)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the median and its distribution-free 95 % interval from order
    statistics (ranks k and n + 1 - k, k the largest with P(Binomial(n, 1/2) < k) <= 0.025).
    With fewer than 6 values no such k exists: the interval is then (min, max)."""
    s = sorted(values)
    n = len(s)
    k, below = 0, 0.0
    while True:
        nxt = below + math.comb(n, k) / 2**n  # P(X <= k)
        if nxt > 0.025:
            break
        below, k = nxt, k + 1
    if k == 0:
        return statistics.median(s), s[0], s[-1]
    return statistics.median(s), s[k - 1], s[n - k]


# --- what is run --------------------------------------------------------------------------------
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


async def _pg_backend(stack: list[Callable[[], Awaitable[None]]]) -> tuple[Any, Any, str | None]:
    """(Sagacity on a scratch schema, its floor, None) or (None, None, why not)."""
    try:
        import psycopg

        from sagacity_agents import Sagacity
        from sagacity_agents.backends import PostgresJournal
        from sagacity_agents.backends.postgres.migrations import migrate

        schema = f"sagacity_durable_bench_{os.getpid()}"
        admin = await psycopg.AsyncConnection.connect(PG, autocommit=True, connect_timeout=3)
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.execute(f'CREATE SCHEMA "{schema}"')
        await admin.close()

        async def drop() -> None:
            conn = await psycopg.AsyncConnection.connect(PG, autocommit=True)
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await conn.close()

        stack.append(drop)
        uri = f"{PG}{'&' if '?' in PG else '?'}options=-csearch_path%3D{schema}"
        await migrate(uri)
        conn = await psycopg.AsyncConnection.connect(uri, autocommit=True)
        stack.append(conn.close)
        await conn.execute("CREATE TABLE sagacity_bench_floor (id bigserial PRIMARY KEY, body text)")
        sagacity = Sagacity(PostgresJournal(uri))
        stack.append(sagacity.aclose)
        return sagacity, _PgFloor(conn), None
    except Exception as exc:  # noqa: BLE001 - no server: the section says so
        return None, None, f"{type(exc).__name__}: {exc}"


async def _peer(tmp: Path, bare_async: Any, stack: list[Callable[[], Awaitable[None]]]) -> tuple[Any, str]:
    """(a job running agent-saga's durable FileWAL path, its description) or (None, why not)."""
    try:
        from importlib.metadata import version

        from agent_saga import ActionSemantics, Compensation, FileWAL  # type: ignore[import-not-found]
        from agent_saga.adapters.openai_agents import saga_run, wrap_tool  # type: ignore[import-not-found]
    except ImportError as exc:
        return None, f"agent-saga is not importable here ({exc}); install the bench extra to measure it"
    try:
        peer_version = version("agent-saga")
    except Exception:  # noqa: BLE001 - installed without metadata
        peer_version = "?"
    wal = FileWAL(tmp / "agent-saga.wal")
    await wal.start()
    stack.append(wal.close)

    def undo(**_: Any) -> None:  # never called: the runs succeed
        pass

    tool = wrap_tool(bare_async, semantics=ActionSemantics.COMPENSABLE,
                     compensate=lambda result: Compensation(fn=undo, kwargs={"r": result}))

    async def job(calls: int) -> float:
        agent = _agent(tool, calls)
        start = time.perf_counter()
        result = await saga_run(agent, "go", wal=wal, max_turns=calls + 5)
        elapsed = time.perf_counter() - start
        if result.final_output != "done":
            raise RuntimeError(f"agent-saga run ended {result!r}")
        return elapsed

    return job, f"agent-saga {peer_version}: FileWAL (durable_commit, its default), COMPENSABLE tool"


def _jobs(tools: dict[str, Any], backends: dict[str, Any], calls: int) -> dict[str, Callable[[], Awaitable[float]]]:
    """Every timed run of a round, by name: ``bare/<kind>``, ``<backend>/<kind>``, and the
    one-call runs ``bare/runs`` / ``sqlite-full/runs`` (``calls`` one-call runs, async tool)."""
    from agents import Runner

    from sagacity_agents import SagaStatus

    def bare(tool: Any) -> Callable[[], Awaitable[float]]:
        async def run() -> float:
            agent = _agent(tool, calls)
            start = time.perf_counter()
            await Runner.run(agent, "go", max_turns=calls + 5)
            return time.perf_counter() - start
        return run

    def wrapped(sagacity: Any, tool: Any) -> Callable[[], Awaitable[float]]:
        async def run() -> float:
            agent = _agent(tool, calls)
            start = time.perf_counter()
            saga = await sagacity.run(agent, "go", max_turns=calls + 5)
            elapsed = time.perf_counter() - start
            if saga.status is not SagaStatus.COMPLETED:
                raise RuntimeError(f"run ended {saga.status}: {saga.exception!r}")
            return elapsed
        return run

    async def bare_runs() -> float:
        agents = [_agent(tools["async"][0], 1) for _ in range(calls)]
        start = time.perf_counter()
        for agent in agents:
            await Runner.run(agent, "go", max_turns=6)
        return time.perf_counter() - start

    async def one_call_runs() -> float:
        sagacity, saga_id = backends["sqlite-full"], None
        agents = [_agent(tools["async"][1], 1) for _ in range(calls)]
        start = time.perf_counter()
        for i, agent in enumerate(agents):
            saga = await sagacity.run(agent, "go", max_turns=6, saga_id=saga_id, close=i == calls - 1)
            saga_id = saga.saga_id
        elapsed = time.perf_counter() - start
        if saga.status is not SagaStatus.COMPLETED:
            raise RuntimeError(f"one-call runs ended {saga.status}: {saga.exception!r}")
        return elapsed

    jobs = {f"bare/{kind}": bare(pair[0]) for kind, pair in tools.items()}
    for name, sagacity in backends.items():
        for kind, pair in tools.items():
            jobs[f"{name}/{kind}"] = wrapped(sagacity, pair[1])
    jobs["bare/runs"] = bare_runs
    jobs["sqlite-full/runs"] = one_call_runs
    return jobs


async def _rounds(jobs: dict[str, Callable[[], Awaitable[float]]], floors: dict[str, Any], rounds: int,
                  warmup: int, commits: int, progress: Callable[[int, int], None] | None) -> dict[str, list[float]]:
    """Raw seconds per job and per floor, one value per measured round (rotating order)."""
    names = list(jobs)
    raw: dict[str, list[float]] = {name: [] for name in [*names, *(f"{f}/commit" for f in floors)]}
    gc.collect()
    gc.freeze()  # the SDK's import-time objects: each collection below walks only new garbage
    try:
        for r in range(warmup + rounds):
            shift = r % len(names)
            times = {}
            for name in names[shift:] + names[:shift]:
                gc.collect()
                times[name] = await jobs[name]()
            for floor_name, floor in floors.items():  # between rounds: the round's bare commit
                times[f"{floor_name}/commit"] = await _floor(floor, commits)
            if r >= warmup:
                for name, value in times.items():
                    raw[name].append(value)
            if progress is not None:
                progress(r + 1, warmup + rounds)
    finally:
        gc.unfreeze()
    return raw


def analyse(raw: dict[str, list[float]], calls: int) -> dict[str, list[float]]:
    """Per-round derived series (microseconds, percent, ratios) from :func:`_rounds`' raw times."""
    out: dict[str, list[float]] = {}
    n = len(raw["bare/async"])
    for key, values in raw.items():
        if key.endswith("/commit"):
            out[f"{key.split('/')[0]}/commit_us"] = [v * 1e6 for v in values]
    for key in raw:
        backend, _, kind = key.partition("/")
        if backend == "bare" or key.endswith("/commit") or kind == "runs":
            continue
        bare = raw[f"bare/{kind}"]
        added = [(raw[key][i] - bare[i]) / calls * 1e6 for i in range(n)]
        out[f"{key}/added_us"] = added
        out[f"{key}/per_turn_pct"] = [(raw[key][i] - bare[i]) / bare[i] * 100 for i in range(n)]
        out[f"{key}/run_per_call_us"] = [v / calls * 1e6 for v in raw[key]]
        commit = out.get(f"{backend}/commit_us")
        if commit is not None:
            out[f"{key}/beyond_us"] = [added[i] - commit[i] for i in range(n)]
            out[f"{key}/ratio"] = [added[i] / commit[i] for i in range(n)]
    if "sqlite-full/runs" in raw:
        runs = [(raw["sqlite-full/runs"][i] - raw["bare/runs"][i]) / calls * 1e6 for i in range(n)]
        out["one_call_runs/added_us"] = runs
        out["one_call_runs/ratio"] = [runs[i] / out["sqlite-full/async/added_us"][i] for i in range(n)]
        out["one_call_runs/wall_ratio"] = [raw["sqlite-full/runs"][i] / raw["sqlite-full/async"][i] for i in range(n)]
    if "agent-saga/async" in raw:
        out["agent-saga/async/beyond_us"] = [a - c for a, c in zip(out["agent-saga/async/added_us"],
                                                                     out["sqlite-full/commit_us"], strict=True)]
        out["ours_to_peer/ratio"] = [a / p for a, p in zip(out["sqlite-full/async/added_us"],
                                                         out["agent-saga/async/added_us"], strict=True)]
    return out


def _fsyncs(calls: int) -> dict[str, Any]:
    """fsyncs of one run and of the same calls as one-call runs (``bench/fsyncs.py``, strace)."""
    import importlib.util
    import shutil

    if not shutil.which("strace"):
        return {"error": "strace not installed"}
    try:
        spec = importlib.util.spec_from_file_location("fsyncs", Path(__file__).with_name("fsyncs.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return {"per_run": module.count(calls, False), "one_call_runs": module.count(calls, False, runs=calls),
                "calls": calls}
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return {"error": str(exc)}


async def run_durable(calls: int = 20, rounds: int = 30, warmup: int = 3, commits: int = 20,
                      progress: Callable[[int, int], None] | None = None, postgres: bool = True,
                      peer: bool = True, fsyncs: bool = True) -> dict[str, Any]:
    """The measurements of the module notes, as a JSON-able dict (see :func:`print_durable`).

    Args:
        calls: tool calls per run (and one-call runs per round); rounds: measured rounds (the
        issue's measure needs >= 30); warmup: rounds run first and discarded; commits: bare
        commits timed between rounds (their median is the round's bare commit); progress:
        ``(done, total)`` callback; postgres / peer / fsyncs: whether to try each section.
    """
    from agents import set_tracing_disabled

    from sagacity_agents import Sagacity
    from sagacity_agents.backends import InMemoryJournal, SqliteJournal

    set_tracing_disabled(True)
    load_before = os.getloadavg()
    tools = _tools()
    tmp = Path(tempfile.mkdtemp(prefix="sagacity-durable-"))
    stack: list[Callable[[], Awaitable[None]]] = []
    backends = {"memory": Sagacity(InMemoryJournal()), "sqlite-full": Sagacity(SqliteJournal(tmp / "journal.db"))}
    floors: dict[str, Any] = {"sqlite-full": _SqliteFloor(tmp / "floor.db")}
    stack.extend(s.aclose for s in backends.values())
    skipped_pg, peer_note = "not asked for", "not asked for"
    try:
        if postgres:
            pg, pg_floor, skipped_pg = await _pg_backend(stack)
            if pg is not None:
                backends["postgres"], floors["postgres"] = pg, pg_floor
        jobs = _jobs(tools, backends, calls)
        if peer:
            peer_job, peer_note = await _peer(tmp, tools["async"][0], stack)
            if peer_job is not None:
                jobs["agent-saga/async"] = lambda: peer_job(calls)
        raw = await _rounds(jobs, floors, rounds, warmup, commits, progress)
    finally:
        for close in reversed(stack):
            await close()
    series = analyse(raw, calls)
    return {"series": {k: median_interval(v) for k, v in series.items()}, "per_round": series,
            "raw_s": raw, "fsyncs": _fsyncs(calls) if fsyncs else {"error": "not asked for"},
            "postgres_skipped": skipped_pg, "peer": peer_note, "calls": calls, "rounds": rounds,
            "warmup": warmup, "order": list(jobs), "loadavg": [load_before, os.getloadavg()],
            "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "interval": "95 %, distribution-free, order statistics of the rounds", "targets": TARGETS}


def _fmt(x: tuple[float, float, float], unit: str = " us", digits: int = 0) -> str:
    return f"{x[0]:+.{digits}f}{unit} [{x[1]:+.{digits}f}, {x[2]:+.{digits}f}]"


def _verdict(x: tuple[float, float, float], target: float) -> str:
    word = "met" if x[0] <= target else "MISSED"
    return f"{word} (target <= {target:g}; interval's upper end {'within' if x[2] <= target else 'above'})"


def print_durable(result: dict[str, Any]) -> None:
    """Print :func:`run_durable`'s result: medians, their 95 % intervals, the targets."""
    s = result["series"]
    lb, la = result["loadavg"]
    print(f"\n== time a call adds beyond its one durable commit ({result['calls']} calls per run, "
          f"{result['rounds']} rounds after {result['warmup']} warm-up, rotating order of "
          f"{len(result['order'])} runs, gc.collect() before each; {result['cpus']} CPUs, load average "
          f"{lb[0]:.2f} before, {la[0]:.2f} after) ==")
    print(f"medians over rounds; intervals: {result['interval']}")
    for kind in ("async", "sync"):
        a, pct = s[f"memory/{kind}/added_us"], s[f"memory/{kind}/per_turn_pct"]
        print(f"memory {kind:5s}: per turn {_fmt(pct, ' %', 1)} {_verdict(pct, TARGETS[f'memory/{kind}/per_turn_pct'])};"
              f" added per call {_fmt(a)} {_verdict(a, TARGETS[f'memory/{kind}/added_us'])}")
    for backend in ("sqlite-full", "postgres"):
        if f"{backend}/commit_us" not in s:
            print(f"{backend}: skipped ({result.get('postgres_skipped')})")
            continue
        c = s[f"{backend}/commit_us"]
        what = "INSERT+COMMIT (WAL, FULL)" if backend == "sqlite-full" else "autocommit INSERT round trip"
        print(f"{backend}: bare {what} {c[0]:.0f} us [{c[1]:.0f}, {c[2]:.0f}] (timed between rounds)")
        for kind in ("async", "sync"):
            b, a, r = (s[f"{backend}/{kind}/{x}"] for x in ("beyond_us", "added_us", "ratio"))
            print(f"  {kind:5s}: beyond the commit {_fmt(b)} {_verdict(b, TARGETS[f'{backend}/beyond_us'])}")
            print(f"         added per call {_fmt(a)}; median of per-round ratios x{r[0]:.2f} [{r[1]:.2f},"
                  f" {r[2]:.2f}]; ratio of medians x{a[0] / c[0]:.2f} ({a[0]:.0f} / {c[0]:.0f} us)")
    if "one_call_runs/ratio" in s:
        r, w, a = s["one_call_runs/ratio"], s["one_call_runs/wall_ratio"], s["one_call_runs/added_us"]
        one = s["sqlite-full/async/added_us"]
        print(f"SQLite, {result['calls']} one-call runs of one saga against one {result['calls']}-call run, async tool:"
              f" added per call {_fmt(a)} against {one[0]:+.0f} us: median of per-round ratios x{r[0]:.2f}"
              f" [{r[1]:.2f}, {r[2]:.2f}]; ratio of medians x{a[0] / one[0]:.2f};"
              f" {_verdict((max(r[0], a[0] / one[0]), r[1], r[2]), TARGETS['one_call_runs/ratio'])}"
              f" on the larger of the two; wall time per call x{w[0]:.2f} [{w[1]:.2f}, {w[2]:.2f}]")
    if "agent-saga/async/added_us" in s:
        p, b, q = s["agent-saga/async/added_us"], s["agent-saga/async/beyond_us"], s["ours_to_peer/ratio"]
        print(f"peer, {result['peer']}: added per call {_fmt(p)}, beyond one bare SQLite commit {_fmt(b)};"
              f" ours (SQLite FULL, async) / peer: median of per-round ratios x{q[0]:.2f} [{q[1]:.2f}, {q[2]:.2f}],"
              f" ratio of medians x{s['sqlite-full/async/added_us'][0] / p[0]:.2f}")
    else:
        print(f"peer: {result['peer']}")
    f = result["fsyncs"]
    if "per_run" in f:
        print(f"fsyncs (SQLite FULL, strace): {f['per_run']} per {f['calls']}-call run ({f['per_run'] / f['calls']:.2f}"
              f" per call); {f['one_call_runs']} for the same calls as one-call runs")
    else:
        print(f"fsyncs: not counted ({f['error']})")

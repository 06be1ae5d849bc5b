"""A chaos run: worker processes run booking sagas while a driver kills, stops and disconnects
them and recovers what they leave; then invariants are checked against the far side and the
journal.

Each worker runs sagas in a loop through the public API (``Sagacity``, ``compensable``, the
Agents SDK's ``ScriptedModel``: no API key, no network): book a flight, a hotel and a car, then
charge a card that is declined about one time in three (the saga then compensates). Every tool
body and every undo writes what it did to the *far side*, a directory of append-only logs (one
per process, one ``write`` per line, so a kill never leaves half a line) standing for the
external systems: a booking with its reference and the call's idempotency key, a cancellation
with the booking it cancels and the undo's idempotency key. The far side is idempotent per key:
a cancellation repeated under the same undo key is applied once (and counted).

The driver, for ``--seconds``, keeps ``--workers`` workers alive and, at random intervals, sends
one of: SIGKILL to a worker (or to a running recovery), SIGSTOP then SIGCONT (0.2 to 3 lease
periods later), on PostgreSQL ``pg_terminate_backend`` of one of the database's connections,
or a ``recover --all`` (a child process through the API, under the workers' short lease; every
fourth one through the CLI, ``sagacity saga recover --all``). Then every process is stopped, a
final ``recover --all`` runs until two passes in a row give the same answer (and the CLI once),
and the checks run:

* **effect undone or reported**: every booking still live on the far side belongs to a saga
  closed COMPLETED, or to an open saga a recovery left IN_DOUBT or COMPENSATION_FAILED (it
  reports the booking in doubt or still dirty);
* **no undo applied twice**: no booking cancelled under two different undo keys; no cancellation
  of a booking that does not exist or whose saga completed;
* **no saga open without a reason**: every open saga is one ``recover --all`` selects, or one a
  recovery left for a human;
* **every saga verifies** (its hash chain);
* **nothing renewing without progress**: no saga holds more than :data:`MAX_RENEWALS` LEASE_RENEWED
  in a row, and nothing is written after every process stopped.

Printed: runs, kills, stops, connection terminations, recoveries, sagas (by status), violations
by kind. The exit status is 1 on any violation.

Usage::

    python bench/chaos.py --backend sqlite|postgres [--workers 3] [--seconds 60] [--seed 1]
        [--lease-seconds 2] [--dir DIR] [--pg URI] [--json FILE]

The CLI recovery loads the agent as ``bench.chaos:agent`` (run from the repository's root).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

FAR_ENV = "SAGACITY_CHAOS_FAR"
"""The far side's directory, for the tools and undos (children inherit it)."""

MAX_RENEWALS = 30
"""More LEASE_RENEWED than this in a row (ten lease periods) is a run renewing without progress:
no tool of this agent takes more than a fraction of a second, and a stopped process renews
nothing."""

KINDS = ("flight", "hotel", "car")

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root: children run ``python -m bench.chaos`` from there."""

STARTUP_SECONDS = 4.0
"""A worker is left alone this long after it starts (its interpreter imports the SDK)."""

DECLINED = 0.33
"""How often the card charge is declined (the saga then compensates)."""


# --- the far side ---------------------------------------------------------------------------

def far_write(record: dict[str, Any]) -> None:
    """Append one line to this process's far-side log: one ``write`` on an O_APPEND file."""
    folder = os.environ[FAR_ENV]
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(os.path.join(folder, f"far-{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def far_records(folder: Path) -> list[dict[str, Any]]:
    """Every line of every far-side log under ``folder``."""
    records = []
    for path in sorted(folder.glob("far-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


# --- the agent ------------------------------------------------------------------------------

def _undo(kind: str) -> Any:
    def undo(ctx: Any) -> None:
        data = ctx.undo_data or {}
        far_write({"op": "cancel", "kind": kind, "ref": data.get("ref"), "undo_key": ctx.idempotency_key,
                   "saga": ctx.saga_id})

    undo.__qualname__ = f"cancel_{kind}"
    return undo


def _tools() -> list[Any]:
    from agents import function_tool

    from sagacity_agents import compensable, current_idempotency_key, record_undo_data

    def book(kind: str, ref: str) -> str:
        key = current_idempotency_key()
        far_write({"op": "book", "kind": kind, "ref": ref, "key": key})
        record_undo_data({"ref": ref, "key": key})
        return f"{kind} {ref}"

    # Declaration ids given: a worker runs this module as ``python -m bench.chaos``, the CLI's
    # recovery imports it as ``bench.chaos``; the ids must not depend on how it was started.
    def async_booking(kind: str) -> Any:
        async def body(ref: str) -> str:
            await asyncio.sleep(random.uniform(0, 0.03))
            return book(kind, ref)

        body.__name__ = body.__qualname__ = f"book_{kind}"
        body.__doc__ = f"Book a {kind}."
        return function_tool(compensable(undo=_undo(kind), declaration_id=f"chaos:book_{kind}")(body))

    @function_tool
    @compensable(undo=_undo("hotel"), declaration_id="chaos:book_hotel")
    def book_hotel(ref: str) -> str:
        """Book a hotel (a sync body: the SDK runs it in a worker thread)."""
        time.sleep(random.uniform(0, 0.03))
        return book("hotel", ref)

    @function_tool
    @compensable(undo=_undo("charge"), declaration_id="chaos:charge_card")
    async def charge_card(ref: str, declined: bool) -> str:
        """Charge the card; a declined card raises before anything is charged (the saga then
        compensates the bookings)."""
        await asyncio.sleep(random.uniform(0, 0.01))
        if declined:
            raise RuntimeError(f"card declined for {ref}")
        return book("charge", ref)

    return [async_booking("flight"), book_hotel, async_booking("car"), charge_card]


_TOOLS: list[Any] = []


def agent(run: str = "", declined: bool = False) -> Any:
    """The booking agent; with ``run`` (a unique reference) its scripted model books a flight, a
    hotel and a car and charges the card; without, it only answers (for recovery: its tools
    declare the undos)."""
    from agents import Agent
    from agents.testing import ScriptedModel, assistant_message, function_call

    if not _TOOLS:
        _TOOLS.extend(_tools())
    model = ScriptedModel()
    if run:
        for n, kind in enumerate(KINDS):
            model.enqueue([function_call(f"book_{kind}", {"ref": f"{run}-{kind}"}, call_id=f"c{n}")])
        model.enqueue([function_call("charge_card", {"ref": run, "declined": declined}, call_id="c9")])
    model.enqueue([assistant_message("done")])
    return Agent(name="booking", model=model, tools=list(_TOOLS))


# --- the processes --------------------------------------------------------------------------

def worker(db: str, seed: int, lease: float) -> None:
    """Run booking sagas until killed. Every other saga gets its id from the worker (the
    explicit-id path: SAGA_OPENED written on its own before RUN_STARTED)."""
    from agents import set_tracing_disabled

    from sagacity_agents import Sagacity

    set_tracing_disabled(True)
    rng = random.Random(seed)

    async def loop() -> None:
        sagacity = Sagacity(db, lease_seconds=lease)
        n = 0
        while True:
            n += 1
            run = f"{os.getpid()}-{seed}-{n}"
            saga_id = f"s-{run}" if rng.random() < 0.5 else None
            try:
                await sagacity.run(agent(run, rng.random() < DECLINED), "book the trip", saga_id=saga_id)
            except Exception:  # noqa: BLE001 - a terminated connection, a lost lease: next saga
                await asyncio.sleep(0.05)
                try:
                    await sagacity.aclose()
                finally:
                    sagacity = Sagacity(db, lease_seconds=lease)

    asyncio.run(loop())


def recover_all(db: str, lease: float) -> list[tuple[str, str]]:
    """One ``recover --all`` through the API: ``(saga id, status or refusal)`` per saga."""
    from agents import set_tracing_disabled

    from sagacity_agents import Sagacity

    set_tracing_disabled(True)

    async def run() -> list[tuple[str, str]]:
        sagacity = Sagacity(db, lease_seconds=lease)
        try:
            done = await sagacity.recover_all(agent())
        finally:
            await sagacity.aclose()
        return [(sid, getattr(getattr(r, "status", None), "value", None) or f"refused: {r}")
                for sid, _why, r in done]

    return asyncio.run(run())


def _child(kind: str, db: str, seed: int, lease: float) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "bench.chaos", f"_{kind}", "--db", db, "--seed", str(seed),
            "--lease-seconds", str(lease)]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def cli_recover_all(db: str, root: Path) -> dict[str, Any]:
    """``sagacity saga recover --all`` as an operator runs it: rc, and whether stderr named an
    API key (it must not)."""
    done = subprocess.run([sys.executable, "-m", "sagacity_agents.cli", "saga", "recover", "--all",
                           "--app", "bench.chaos:agent", "--db", db],
                          cwd=root, capture_output=True, text=True, timeout=600)
    return {"rc": done.returncode, "stderr_api_key": "API_KEY" in done.stderr,
            "stderr": done.stderr[-2000:], "stdout_tail": done.stdout[-2000:]}


# --- the driver -----------------------------------------------------------------------------

class Driver:
    """Keeps the workers alive and sends them trouble (see the module notes)."""

    def __init__(self, args: argparse.Namespace, db: str, root: Path) -> None:
        self.args = args
        self.db = db
        self.root = root
        self.rng = random.Random(args.seed)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.recoverer: subprocess.Popen[bytes] | None = None
        self.stopped: dict[int, float] = {}  # pid -> when to SIGCONT
        self.born: dict[int, float] = {}  # pid -> when started
        self.counts: collections.Counter[str] = collections.Counter()
        self.cli_runs: list[dict[str, Any]] = []
        self.seeds = iter(range(args.seed * 1000, args.seed * 1000 + 10**6))

    def _alive(self) -> list[subprocess.Popen[bytes]]:
        self.workers = [w for w in self.workers if w.poll() is None]
        return self.workers

    def top_up(self) -> None:
        while len(self._alive()) < self.args.workers:
            child = _child("worker", self.db, next(self.seeds), self.args.lease_seconds)
            self.workers.append(child)
            self.born[child.pid] = time.monotonic()
            self.counts["workers started"] += 1

    def wake(self, everyone: bool = False) -> None:
        now = time.monotonic()
        for pid, when in list(self.stopped.items()):
            if everyone or when <= now:
                _signal(pid, signal.SIGCONT)
                del self.stopped[pid]

    def act(self) -> None:
        action = self.rng.choices(["kill", "stop", "terminate", "recover"],
                                  weights=[3, 3, 2 if self.args.backend == "postgres" else 0, 2])[0]
        # A new interpreter takes a few seconds to import the SDK: trouble goes to workers that
        # have been running sagas for a while.
        settled = time.monotonic() - STARTUP_SECONDS
        running = [w for w in self._alive() if w.pid not in self.stopped and self.born[w.pid] < settled]
        if action == "kill" and running:
            target = self.rng.choice(running)
            if self.recoverer is not None and self.recoverer.poll() is None and self.rng.random() < 0.2:
                target = self.recoverer  # a recovery dies too, now and then
                self.counts["recoveries killed"] += 1
            _signal(target.pid, signal.SIGKILL)
            self.counts["kills"] += 1
        elif action == "stop" and running:
            target = self.rng.choice(running)
            _signal(target.pid, signal.SIGSTOP)
            self.stopped[target.pid] = time.monotonic() + self.rng.uniform(0.2, 3.0) * self.args.lease_seconds
            self.counts["stops"] += 1
        elif action == "terminate":
            self.counts["terminations tried"] += 1
            self.counts["connection terminations"] += terminate_one(self.db, self.rng)
        elif action == "recover":
            if self.counts["recover --all"] % 4 == 3:
                self.cli_runs.append(cli_recover_all(self.db, self.root))
                self.counts["recover --all (CLI)"] += 1
            elif self.recoverer is None or self.recoverer.poll() is not None:
                self.recoverer = _child("recover", self.db, 0, self.args.lease_seconds)
            self.counts["recover --all"] += 1

    def run(self) -> None:
        end = time.monotonic() + self.args.seconds
        while time.monotonic() < end:
            self.top_up()
            self.wake()
            self.act()
            time.sleep(self.rng.uniform(0.2, 1.0))
        self.wake(everyone=True)
        for proc in [*self.workers, *([self.recoverer] if self.recoverer else [])]:
            _signal(proc.pid, signal.SIGKILL)
            proc.wait()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def terminate_one(db: str, rng: random.Random) -> int:
    """``pg_terminate_backend`` one connection of the journal's database (not ours): 1 if one
    was terminated."""
    import psycopg

    name = urllib.parse.urlsplit(db).path.lstrip("/")
    with psycopg.connect(db, autocommit=True, connect_timeout=5) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (name,))]
        if not pids:
            return 0
        row = conn.execute("SELECT pg_terminate_backend(%s)", (rng.choice(pids),)).fetchone()
        return int(bool(row and row[0]))


# --- the end: final recovery and the checks -------------------------------------------------

def final_recovery(db: str, lease: float, root: Path) -> dict[str, Any]:
    """Wait out every lease, then ``recover --all`` until two passes agree (at most 8), then the
    CLI once."""
    time.sleep(lease * 1.5 + 0.5)
    passes: list[list[tuple[str, str]]] = []
    for _ in range(8):
        done = subprocess.run([sys.executable, "-m", "bench.chaos", "_recover", "--db", db,
                               "--lease-seconds", str(lease)], cwd=root, capture_output=True,
                              text=True, timeout=900)
        passes.append(sorted(map(tuple, json.loads(done.stdout or "[]"))) if done.returncode == 0
                      else [("error", done.stderr[-500:])])
        if len(passes) >= 2 and passes[-1] == passes[-2]:
            break
        time.sleep(lease + 0.5)
    return {"passes": len(passes), "last": passes[-1], "cli": cli_recover_all(db, root)}


def check(db: str, far: Path, lease: float) -> dict[str, Any]:
    """The invariants (module notes): ``{"sagas": {status: n}, "violations": {kind: [detail]},
    "runs": n, "recoveries": n, "saga_count": n}``."""
    return asyncio.run(_check(db, far, lease))


async def _read(db: str) -> dict[str, list[Any]]:
    from sagacity_agents.stores import open_journal

    journal = open_journal(db)
    try:
        return {sid: await journal.entries(sid) for sid in await journal.saga_ids()}
    finally:
        await journal.close()


def _status(entries: list[Any]) -> tuple[str, bool]:
    """(status, closed): SAGA_CLOSED's status, else the last RUN_ENDED's (or OPEN)."""
    from sagacity_agents.backends import Phase

    for entry in reversed(entries):
        if entry.phase is Phase.SAGA_CLOSED:
            return str(entry.payload.get("status")), True
    ended = [e for e in entries if e.phase is Phase.RUN_ENDED]
    return (str(ended[-1].payload.get("status")) if ended else "OPEN"), False


async def _check(db: str, far: Path, lease: float) -> dict[str, Any]:
    from sagacity_agents.backends import Phase
    from sagacity_agents.core.chain import verify_entries
    from sagacity_agents.core.recovery import recovery_reason

    sagas = await _read(db)
    violations: dict[str, list[str]] = collections.defaultdict(list)
    statuses: collections.Counter[str] = collections.Counter()
    by_ref: dict[str, str] = {}  # booking reference -> saga id (from the INTENTs' arguments)
    runs = recoveries = 0
    for sid, entries in sagas.items():
        status, closed = _status(entries)
        statuses[status if closed else f"open {status}"] += 1
        result = verify_entries(sid, entries)
        if not result.ok:
            violations["does not verify"].append(f"{sid}: {result}")
        if not closed and status not in ("IN_DOUBT", "COMPENSATION_FAILED") \
                and recovery_reason(entries) is None:
            violations["open without a reason"].append(f"{sid}: {[e.phase.value for e in entries][-4:]}")
        streak = longest = 0
        for entry in entries:
            streak = streak + 1 if entry.phase is Phase.LEASE_RENEWED else 0
            longest = max(longest, streak)
            if entry.phase is Phase.RUN_STARTED:
                agent_name = entry.payload.get("agent") if isinstance(entry.payload, dict) else None
                runs += agent_name == "booking"
                recoveries += agent_name == "recover"
            if entry.phase is Phase.INTENT and isinstance(entry.payload, dict):
                ref = (entry.payload.get("args") or {}).get("ref")
                if isinstance(ref, str):
                    by_ref[ref] = sid
        if longest > MAX_RENEWALS:
            violations["renewing without progress"].append(f"{sid}: {longest} LEASE_RENEWED in a row")
    await asyncio.sleep(2 * lease)  # a process still renewing anything would write meanwhile
    late = await _read(db)
    for sid, entries in late.items():
        if len(entries) != len(sagas.get(sid, [])):
            violations["written after every process stopped"].append(sid)
    _check_far(far_records(far), sagas, by_ref, violations)
    return {"sagas": dict(statuses), "violations": dict(violations), "runs": runs,
            "recoveries": recoveries, "saga_count": len(sagas)}


def _check_far(records: list[dict[str, Any]], sagas: dict[str, list[Any]], by_ref: dict[str, str],
               violations: dict[str, list[str]]) -> None:
    booked = {r["ref"]: r for r in records if r["op"] == "book"}
    cancels: dict[str, set[str]] = collections.defaultdict(set)
    for r in records:
        if r["op"] == "cancel":
            cancels[str(r["ref"])].add(str(r["undo_key"]))
    for ref, keys in cancels.items():
        if len(keys) > 1:
            violations["undo applied twice"].append(f"{ref}: {len(keys)} undo keys")
        if ref not in booked:
            violations["undo without an effect"].append(ref)
        elif ref in by_ref and _status(sagas[by_ref[ref]]) == ("COMPLETED", True):
            violations["undo of a completed saga"].append(ref)
    for ref in booked:
        if ref in cancels:
            continue
        sid = by_ref.get(ref)
        if sid is None:
            violations["effect without a journaled call"].append(ref)
            continue
        status, closed = _status(sagas[sid])
        if closed and status == "COMPLETED":
            continue
        if not closed and status in ("IN_DOUBT", "COMPENSATION_FAILED"):
            continue  # reported: a recovery left it for a human, naming the call
        violations["effect neither undone nor reported"].append(f"{ref} (saga {sid}, {status})")


# --- set-up and the report ------------------------------------------------------------------

def postgres_database(base: str) -> str:
    """A new database on ``base``'s server, migrated: its URI."""
    import psycopg

    from sagacity_agents.backends.postgres.migrations import migrate

    name = f"sagacity_chaos_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    uri = urllib.parse.urlsplit(base)._replace(path=f"/{name}").geturl()
    asyncio.run(migrate(uri))
    return uri


def drop_database(base: str, uri: str) -> None:
    """Drop the run's database (its connections terminated first)."""
    import psycopg

    name = urllib.parse.urlsplit(uri).path.lstrip("/")
    with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def report(args: argparse.Namespace, driver: Driver, final: dict[str, Any], checked: dict[str, Any],
           seconds: float) -> dict[str, Any]:
    """Print the figures; return them as one JSON-able dict."""
    violations = checked["violations"]
    figures = {
        "backend": args.backend, "workers": args.workers, "seconds": args.seconds, "seed": args.seed,
        "lease_seconds": args.lease_seconds, "wall_seconds": round(seconds, 1),
        "load_average": os.getloadavg()[0],
        "runs": checked["runs"], "recoveries journaled": checked["recoveries"],
        **{k: driver.counts[k] for k in ("kills", "stops", "terminations tried", "connection terminations", "recover --all",
                                         "recover --all (CLI)", "recoveries killed", "workers started")},
        "sagas": checked["saga_count"], "by status": checked["sagas"],
        "final recover passes": final["passes"], "final CLI rc": final["cli"]["rc"],
        "CLI stderr named an API key": any(c["stderr_api_key"] for c in [*driver.cli_runs, final["cli"]]),
        "violations": {k: len(v) for k, v in violations.items()},
        "violation examples": {k: v[:5] for k, v in violations.items()},
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    print("violations: 0" if not violations else f"VIOLATIONS: {sum(map(len, violations.values()))}")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="run", help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lease-seconds", type=float, default=2.0)
    parser.add_argument("--dir", default=None, help="where the journal and far side go (default: a new temp dir)")
    parser.add_argument("--pg", default=os.environ.get("SAGACITY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL database afterwards")
    args = parser.parse_args(argv)
    if args.command == "_worker":
        worker(args.db, args.seed, args.lease_seconds)
        return 0
    if args.command == "_recover":
        print(json.dumps(recover_all(args.db, args.lease_seconds)))
        return 0
    root = ROOT
    folder = Path(args.dir or tempfile.mkdtemp(prefix="sagacity-chaos-"))
    (folder / "far").mkdir(parents=True, exist_ok=True)
    os.environ[FAR_ENV] = str(folder / "far")
    os.environ.setdefault("PYTHONPATH", str(root))
    db = postgres_database(args.pg) if args.backend == "postgres" else str(folder / "journal.db")
    if args.backend == "sqlite":
        from sagacity_agents.backends import SqliteJournal

        asyncio.run(SqliteJournal(db).close())  # the file exists before the first CLI recovery
    print(f"chaos: {args.backend}, {args.workers} workers, {args.seconds:g} s, seed {args.seed}, in {folder}",
          flush=True)
    began = time.monotonic()
    driver = Driver(args, db, root)
    driver.run()
    final = final_recovery(db, args.lease_seconds, root)
    checked = check(db, folder / "far", args.lease_seconds)
    figures = report(args, driver, final, checked, time.monotonic() - began)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    if args.backend == "postgres" and not args.keep:
        drop_database(args.pg, db)
    return 1 if checked["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())

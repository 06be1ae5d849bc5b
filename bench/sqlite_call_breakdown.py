"""Where a wrapped tool call's time goes with the SQLite journal (``synchronous=FULL``), in
microseconds and as multiples of one bare INSERT + COMMIT timed in the same rounds: the profile
behind ``bench/overhead.py --durable``'s SQLite figure (issue 22).

Runs the 20-call scripted agent of ``bench/durable_cost.py`` bare and under
``Sagacity(SqliteJournal(path))``, interleaved, async tool (``--sync``: sync tool), and times:

* the INTENT's append, split at its hand-over to the journal's thread: the wait for that thread to
  start (``hand-over``), the write there (``SQL``: BEGIN IMMEDIATE, the reads, the INSERT, the
  COMMIT and the file check; ``fdatasync`` of the ``-wal``), and the way back to the event loop
  (``answer``: ``call_soon_threadsafe`` until the awaiting call resumes);
* the outcome's append (written by the loop itself when the writer is idle: no thread, no sync);
* the rest of ``run_call`` (journal-independent: the payload, the frame, spans), and what the
  saga costs outside it (the run's own entries, hooks, the lease), from the paired overhead.

The timing wraps a few methods (each adds ~1 us); the bench is for shares, not for the target,
which ``bench/overhead.py --durable`` measures unwrapped. With a sync tool the appends are written
on the SDK's worker thread (no hand-over), so only the ``write`` line is split.

Usage::

    python bench/sqlite_call_breakdown.py [--rounds 30] [--sync]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from agents import Runner, set_tracing_disabled

sys.path.insert(0, str(Path(__file__).resolve().parent))
from durable_cost import _SqliteFloor, _agent, _floor, _tools  # noqa: E402

from sagacity_agents import Sagacity  # noqa: E402
from sagacity_agents.backends import SqliteJournal  # noqa: E402
from sagacity_agents.backends.sqlite import journal as sqlite_journal  # noqa: E402
from sagacity_agents.backends.sqlite import writer as sqlite_writer  # noqa: E402
from sagacity_agents.core.saga import calls  # noqa: E402

TIMES: dict[str, list[float]] = defaultdict(list)
_marks: dict[str, float] = {}


def _instrument() -> None:
    """Wrap the methods the breakdown reads its marks from (see the module notes)."""
    submit = sqlite_writer.GroupWriter.submit
    drain = sqlite_writer.GroupWriter._drain
    write_group = sqlite_journal.SqliteJournal._write_group
    sync_wal = sqlite_journal.SqliteJournal._sync_wal
    run_call = calls.CallRecorder.run_call
    run_call_sync = calls.CallRecorder.run_call_sync

    async def timed_submit(self: Any, requests: list[Any]) -> Any:
        if requests[0].phase.value != "INTENT":
            start = time.perf_counter()
            try:
                return await submit(self, requests)
            finally:
                phases = " + ".join(r.phase.value for r in requests)
                TIMES[f"{phases} append, from the loop"].append(time.perf_counter() - start)
        _marks.clear()
        _marks["submit"] = time.perf_counter()
        result = await submit(self, requests)
        end = time.perf_counter()
        if {"drain", "written", "synced"} <= _marks.keys():
            TIMES["INTENT: hand-over to the journal's thread"].append(_marks["drain"] - _marks["submit"])
            TIMES["INTENT: SQL on that thread"].append(_marks["written"] - _marks["drain"] - _marks["synced"])
            TIMES["INTENT: fdatasync of the -wal"].append(_marks["synced"])
            TIMES["INTENT: answer back to the loop"].append(end - _marks["written"])
            TIMES["INTENT append, all"].append(end - _marks["submit"])
        return result

    def timed_drain(self: Any) -> None:
        _marks.setdefault("drain", time.perf_counter())
        drain(self)

    def timed_write_group(self: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return write_group(self, *args)
        finally:
            name = threading.current_thread().name
            if name.startswith("sagacity-sqlite"):  # the journal's thread
                _marks["written"] = time.perf_counter()
            elif threading.current_thread() is not threading.main_thread():
                phase = args[0][0].requests[0].phase.value
                TIMES[f"{phase} append, on the SDK's worker thread"].append(time.perf_counter() - start)

    def timed_sync(self: Any) -> None:
        start = time.perf_counter()
        try:
            sync_wal(self)
        finally:
            _marks["synced"] = time.perf_counter() - start

    async def timed_run_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await run_call(self, *args, **kwargs)
        finally:
            TIMES["run_call, all"].append(time.perf_counter() - start)

    def timed_run_call_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return run_call_sync(self, *args, **kwargs)
        finally:
            TIMES["run_call, all"].append(time.perf_counter() - start)

    sqlite_writer.GroupWriter.submit = timed_submit  # type: ignore[method-assign]
    sqlite_writer.GroupWriter._drain = timed_drain  # type: ignore[method-assign]
    sqlite_journal.SqliteJournal._write_group = timed_write_group  # type: ignore[method-assign]
    sqlite_journal.SqliteJournal._sync_wal = timed_sync  # type: ignore[method-assign]
    calls.CallRecorder.run_call = timed_run_call  # type: ignore[method-assign]
    calls.CallRecorder.run_call_sync = timed_run_call_sync  # type: ignore[method-assign]


async def main(rounds: int, kind: str) -> None:
    set_tracing_disabled(True)
    _instrument()
    bare_tool, wrapped_tool = _tools()[kind]
    tmp = Path(tempfile.mkdtemp(prefix="sagacity-breakdown-"))
    sagacity = Sagacity(SqliteJournal(tmp / "journal.db"))
    floor = _SqliteFloor(tmp / "floor.db")
    pairs, commits = [], []
    for round_no in range(rounds + 1):  # round 0 warms up
        if round_no == 1:
            TIMES.clear()
        commits.append(await _floor(floor, 20))
        start = time.perf_counter()
        await Runner.run(_agent(bare_tool, 20), "go", max_turns=30)
        bare = time.perf_counter() - start
        start = time.perf_counter()
        await sagacity.run(_agent(wrapped_tool, 20), "go", max_turns=30)
        if round_no:
            pairs.append(time.perf_counter() - start - bare)
    await sagacity.aclose()
    commit = statistics.median(commits[1:])
    overhead = statistics.median(pairs) / 20
    inside = statistics.median(TIMES["run_call, all"])
    print(f"SQLite FULL, {kind} tool, {rounds} rounds: bare INSERT+COMMIT {commit * 1e6:.0f} us; "
          f"added per call {overhead * 1e6:.0f} us = x{overhead / commit:.2f}")
    for name, values in TIMES.items():
        median = statistics.median(values)
        print(f"  {name:44s} {median * 1e6:7.0f} us  x{median / commit:.2f}")
    print(f"  {'outside run_call (run entries, hooks, lease)':44s} {(overhead - inside) * 1e6:7.0f} us"
          f"  x{(overhead - inside) / commit:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sync", action="store_true", help="a sync tool (default: async)")
    options = parser.parse_args()
    asyncio.run(main(options.rounds, "sync" if options.sync else "async"))

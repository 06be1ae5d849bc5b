"""fsyncs per call and per run on SQLite (issue 22, items 1 and 2), counted with strace.

A child process runs one scripted agent run of ``--calls`` tool calls through ``Sagacity.run``
on a fresh SQLite journal (``synchronous=FULL``), after one untimed warm-up run; ``strace -f``
records every ``fsync`` / ``fdatasync`` of the child, and the run is bracketed by two marker
system calls (``access`` of a path that does not exist) so that only its own syncs are counted.
Printed for the default commit rule (one durable commit per call: the INTENT's), for
``durable_outcomes=True`` (every outcome durable too), and for the same calls made as one-call
runs of one saga (kept open between runs, closed by the last).

Targets (issue 22): 1 fsync per call; a 20-call run at most 22 fsyncs (44 before).

Needs ``strace`` (Debian: ``apt-get install strace``). Usage::

    python bench/fsyncs.py [--calls 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_BEGIN, _END = "/sagacity-bench-mark-begin", "/sagacity-bench-mark-end"


async def _child(path: str, calls: int, durable_outcomes: bool, runs: int = 1) -> None:
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import Sagacity, SagaStatus, compensable
    from sagacity_agents.backends import SqliteJournal

    set_tracing_disabled(True)

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def reserve(item: str, qty: int) -> str:
        """Reserve ``qty`` units of ``item``."""
        return f"R-{item}-{qty}"

    def agent(n: int = calls) -> Agent:
        model = ScriptedModel()
        for i in range(n):
            model.enqueue([function_call("reserve", {"item": f"i{i}", "qty": i + 1}, call_id=f"c{i}")])
        model.enqueue([assistant_message("done")])
        return Agent(name="bench", model=model, tools=[reserve])

    sagacity = Sagacity(SqliteJournal(path, durable_outcomes=durable_outcomes))
    try:
        await sagacity.run(agent(), "go", max_turns=calls + 5)  # warm-up, not counted
        os.access(_BEGIN, os.F_OK)
        if runs == 1:
            result = await sagacity.run(agent(), "go", max_turns=calls + 5)
        else:  # one saga, ``runs`` short runs of calls/runs calls each, closed by the last
            saga_id = None
            for r in range(runs):
                result = await sagacity.run(agent(calls // runs), "go", max_turns=calls + 5,
                                            saga_id=saga_id, close=r == runs - 1)
                saga_id = result.saga_id
        os.access(_END, os.F_OK)
        assert result.status is SagaStatus.COMPLETED, result.status
    finally:
        await sagacity.aclose()


def count(calls: int, durable_outcomes: bool, runs: int = 1) -> int:
    """fsync + fdatasync calls of one run, between the markers."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.txt"
        subprocess.run(
            ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync,access,faccessat,faccessat2",
             "-o", str(trace), sys.executable, __file__, "--child", str(Path(tmp) / "j.db"),
             "--calls", str(calls), "--runs", str(runs)]
            + (["--durable-outcomes"] if durable_outcomes else []),
            check=True,
        )
        inside, syncs = False, 0
        for line in trace.read_text().splitlines():
            if _BEGIN in line:
                inside = True
            elif _END in line:
                break
            elif inside and re.search(r"\b(fsync|fdatasync)\(", line):
                syncs += 1
        return syncs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--child", metavar="DB")
    parser.add_argument("--durable-outcomes", action="store_true")
    parser.add_argument("--runs", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(args.child, args.calls, args.durable_outcomes, args.runs))
        return
    if shutil.which("strace") is None:
        sys.exit("strace is not installed (Debian: apt-get install strace)")
    print(f"{args.calls}-call run on SQLite (synchronous=FULL), load average {os.getloadavg()}")
    for durable, name in ((False, "default (one durable commit per call)"),
                          (True, "durable_outcomes=True")):
        n = count(args.calls, durable)
        print(f"  {name:40s}: {n:3d} fsyncs per run, {n / args.calls:.2f} per call"
              + ("   (target: <= 22 per 20-call run, 1 per call)" if not durable else ""))
    n = count(args.calls, False, runs=args.calls)
    print(f"  {'the same calls as ' + str(args.calls) + ' one-call runs of one saga':40s}: {n:3d} fsyncs, "
          f"{n / args.calls:.2f} per call (each run's RUN_ENDED is durable)")


if __name__ == "__main__":
    main()

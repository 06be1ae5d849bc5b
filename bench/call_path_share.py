"""Where the saga layer's own time goes in memory, by a sampling profiler (issue 37's profile of
the missed in-memory target).

A deterministic profiler (cProfile) charges every Python call a fixed cost, so it overstates a
layer made of many small functions, as ours is; ``py-spy`` samples the running process instead
and changes nothing in it. This script runs, in a child process under ``py-spy record --format
raw``, the public harness's scripted agent (``bench/public_harness.py``: a one-argument tool,
``--calls`` calls then a final answer, ``Sagacity(":memory:")``, tracing disabled) in a loop for
``--seconds`` seconds, sampling only the thread holding the GIL (``--gil``: the Python work,
whichever thread does it; a thread waiting for the disk, a lock or the selector is not sampled),
then charges each sample to the innermost frame that is either the Agents SDK's or ours
(``sagacity_agents``): a sample whose innermost such frame is ours is our layer's own time (the
standard-library work it calls included), one whose innermost is the SDK's is the SDK's,
whatever called it; the rest is the event loop's own. Printed: our share of the samples and the
functions that hold it, each as a share of all samples.

Our share of the wrapped run's samples, s, gives our own cost per call as
``s / (1 - s) * bare run / calls``, assuming the SDK's and the loop's work are the same in the
bare run (the SDK's are: the same calls of its functions in both, by cProfile's counts; the
loop's grows a little with our awaits, which this counts as the loop's, not ours).

Needs ``py-spy`` (``pip install -e ".[bench]"``; on Linux it reads the child's memory, which a
container may forbid: then run as root or with ``--cap-add SYS_PTRACE``).

    python bench/call_path_share.py [--seconds 30] [--calls 20] [--sync] [--top 30]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

_LOOP = textwrap.dedent('''
    import asyncio, sys, time
    sys.path.insert(0, {bench!r})
    from public_harness import build_tools, scripted_agent
    from agents import set_tracing_disabled
    from sagacity_agents import Sagacity
    set_tracing_disabled(True)
    tool = build_tools()[{kind!r}][1]

    async def main():
        sagacity = Sagacity(":memory:")
        end = time.monotonic() + {seconds}
        while time.monotonic() < end:
            await sagacity.run(scripted_agent(tool, {calls}), "hold the seats", max_turns={calls} + 5)

    asyncio.run(main())
''')

_FRAME = re.compile(r"^(?P<name>.*) \((?P<path>[^():]*):\d+\)$")


def owner(frame: str) -> tuple[str, str] | None:
    """``("ours" | "sdk", "function module")`` of one py-spy frame, ``None`` for anyone else's."""
    match = _FRAME.match(frame)
    if match is None:
        return None
    path = match["path"]
    if "sagacity_agents/" in path:
        return "ours", f"{match['name']}  {path.split('sagacity_agents/')[-1]}"
    if path.startswith("agents/") or "/agents/" in path:
        return "sdk", match["name"]
    return None


def shares(raw: Path) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """(samples of the GIL's holder after start-up, samples by owner, our samples by function)."""
    total, owners, ours = 0, collections.Counter(), collections.Counter()
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or "_find_and_load" in stack:
            continue  # start-up, or no Python frame
        n = int(count)
        total += n
        innermost = None
        for frame in stack.split(";"):
            innermost = owner(frame) or innermost
        kind = innermost[0] if innermost else "asyncio and the rest"
        owners[kind] += n
        if innermost and kind == "ours":
            ours[innermost[1]] += n
    return total, owners, ours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--sync", action="store_true", help="the sync tool (its body on the SDK's thread)")
    parser.add_argument("--rate", type=int, default=2000, help="samples per second (default 2000)")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy")
    if spy is None:
        print("py-spy is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="call-path-share-"))
    script, raw = work / "loop.py", work / "samples.txt"
    script.write_text(_LOOP.format(bench=str(Path(__file__).resolve().parent), seconds=args.seconds,
                                   calls=args.calls, kind="sync" if args.sync else "async"), encoding="utf-8")
    # --nonblocking: read the child without pausing it (a paused child at this rate can starve).
    subprocess.run([spy, "record", "--gil", "--nonblocking", "--rate", str(args.rate), "--format", "raw",
                    "--output", str(raw), "--", sys.executable, str(script)],
                   check=True, capture_output=True, timeout=args.seconds * 3 + 120)
    total, owners, ours = shares(raw)
    share = owners["ours"] / total
    print(f"{args.calls}-call runs, {'sync' if args.sync else 'async'} tool, {total} samples of the GIL's"
          f" holder in {args.seconds:.0f} s; {os.cpu_count()} CPUs, load average"
          f" {tuple(round(x, 2) for x in os.getloadavg())}")
    for kind, n in owners.most_common():
        print(f"  {kind:22s} {n / total * 100:5.1f} %")
    print(f"ours = {share * 100:.1f} % of the wrapped run: {share / (1 - share) * 100:.1f} % of the bare run's"
          f" time (the SDK's share and the loop's are the same in both)")
    print(f"our functions holding it (share of all samples; {len(ours)} functions):")
    for name, n in ours.most_common(args.top):
        print(f"  {n / total * 100:5.2f} %  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

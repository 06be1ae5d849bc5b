"""Where a keyring verify's time goes (issue 37): per thread, per entry, beside bare Ed25519.

Reads the tagged SQLite journal ``bench/verify_speed.py`` builds (``--dir``, default the same as
there; run that first) and times ``core.evidence.verify_sagas`` with a keyring ``--rounds``
times, each after ``--threads`` bare Ed25519 verifies of the same tags (the 2-core yardstick).
For every thread of the process it prints, from ``/proc/self/task/*/schedstat`` (Linux), the
time it ran, the time it waited for a core (other processes, or more runnable threads than
cores) and the rest of the wall time (asleep: waiting for the GIL, for work, or for a read), in
microseconds per entry. Then the same verify with every tag already in the cache: the Python
work per entry on the caller's thread and on the journal's thread, which the pool's threads
wait on whenever they are back from a verify and one of those holds the GIL.

Usage::

    python bench/verify_speed.py --sagas 200 --keyring-sagas 200 --no-pg --no-cli   # builds the file
    python bench/keyring_verify_split.py [--rounds 3] [--keyring-sagas 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from verify_speed import bare_ed25519

from sagacity_agents.backends import SqliteJournal
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.signing import Keyring


def schedstat() -> dict[int, tuple[float, float]]:
    """Thread id -> (µs run, µs waited for a core) so far."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                ran, waited, _ = stat.read().split()
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        found[int(tid)] = (int(ran) / 1e3, int(waited) / 1e3)
    return found


class Sampler:
    """Samples every thread's schedstat and name every few ms while a run lasts (a thread that
    ends during the run, such as a pool made per verify, keeps its last sample)."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[float, float]] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.sample()

    def sample(self) -> None:
        """Take one sample."""
        self.names.update({t.native_id: t.name for t in threading.enumerate() if t.native_id})
        self.last.update(schedstat())

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


async def split(path: Path, evidence: Evidence) -> tuple[float, dict[str, tuple[float, float, float]]]:
    """(µs of wall per entry, thread name -> (ran, waited for a core, asleep) µs per entry) of
    one ``verify_sagas`` of the journal at ``path`` (every saga must verify)."""
    journal = SqliteJournal(path)
    await journal.saga_ids()  # its thread started before the run
    before = schedstat()
    try:
        with Sampler() as sampler:
            start = time.perf_counter()
            results = await verify_sagas(journal, evidence=evidence)
            wall = (time.perf_counter() - start) * 1e6
    finally:
        await journal.close()
    assert all(r.ok for r in results), [r for r in results if not r.ok][:1]
    n = sum(r.entries for r in results)
    per: dict[str, tuple[float, float, float]] = {}
    for tid, (ran, waited) in sampler.last.items():
        ran, waited = ran - before.get(tid, (0, 0))[0], waited - before.get(tid, (0, 0))[1]
        name = sampler.names.get(tid, str(tid))
        if ran > 0 and name != "sampler":
            per[name] = (ran / n, waited / n, (wall - ran - waited) / n)
    return wall / n, per


def show(label: str, wall: float, per: dict[str, Any], bare: float | None) -> None:
    """One line per run and one per thread."""
    ratio = f" = {bare / wall:.2f}x bare" if bare else ""
    cpu = sum(ran for ran, _, _ in per.values())
    print(f"{label}: {wall:6.1f} µs/entry wall{ratio}; CPU {cpu:6.1f} µs/entry; load {os.getloadavg()[0]:.2f}")
    for name, (ran, waited, asleep) in sorted(per.items()):
        print(f"    {name:20s} ran {ran:6.1f}  waited for a core {waited:6.1f}  asleep {asleep:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "sagacity-verify-bench"))
    parser.add_argument("--keyring-sagas", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    work = Path(args.dir)
    path, keyring = work / f"tagged-{args.keyring_sagas}-v2.db", Keyring.load(work / "keys")
    for _ in range(args.rounds):
        _, one, many = bare_ed25519(path, keyring, args.threads)
        bare = 1e6 / max(one, many)
        print(f"bare Ed25519: {1e6 / one:.1f} µs/verify on 1 thread, {1e6 / many:.1f} µs/entry on {args.threads}")
        show("verify_sagas", *asyncio.run(split(path, Evidence(keyring=keyring))), bare)
    warm = Evidence(keyring=keyring)
    asyncio.run(split(path, warm))  # every tag proven and remembered: no verify left
    show("tags already verified (Python only)", *asyncio.run(split(path, warm)), None)


if __name__ == "__main__":
    main()

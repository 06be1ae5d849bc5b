"""SQLite journal shared by several processes (spawned, so nothing is inherited but the file)."""

from __future__ import annotations

import multiprocessing

import pytest

from sagacity_agents.core.chain import verify_journal
from sagacity_agents.backends.sqlite.journal import SqliteJournal

from .journal_contract import assert_chain
from .journal_mp_worker import append_many

PER_PROCESS = 100

pytestmark = pytest.mark.multiprocess


def run_writers(path: str, sagas: list[str], synchronous: str = "FULL", pause: float = 0.002) -> None:
    """Start one spawned writer per saga name; they open the file together and interleave
    (``pause`` between appends; see ``journal_mp_worker.append_many``)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(sagas))
    procs = [
        ctx.Process(
            target=append_many,
            args=(path, saga, f"p{n}", PER_PROCESS, barrier, synchronous, pause),
        )
        for n, saga in enumerate(sagas)
    ]
    for proc in procs:
        proc.start()
    try:
        for proc in procs:
            proc.join(timeout=120)
        assert [p.exitcode for p in procs] == [0] * len(procs)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()


async def test_two_processes_two_sagas_one_file(tmp_path):
    path = str(tmp_path / "shared.db")
    run_writers(path, ["saga-a", "saga-b"])
    journal = SqliteJournal(path)
    try:
        assert sorted(await journal.saga_ids()) == ["saga-a", "saga-b"]
        for n, saga in enumerate(["saga-a", "saga-b"]):
            entries = await journal.entries(saga)
            assert_chain(entries, PER_PROCESS)
            assert [e.payload for e in entries] == [{"writer": f"p{n}", "i": i} for i in range(PER_PROCESS)]
        assert all(r.ok for r in await verify_journal(journal))
    finally:
        await journal.close()


async def test_two_processes_one_saga_one_file(tmp_path):
    path = str(tmp_path / "shared.db")
    run_writers(path, ["same", "same"])
    journal = SqliteJournal(path)
    try:
        entries = await journal.entries("same")
        assert_chain(entries, 2 * PER_PROCESS)
        keys = [e.write_key for e in entries]
        assert sorted(keys) == sorted(f"p{n}:{i}" for n in range(2) for i in range(PER_PROCESS))
        for writer in ("p0", "p1"):  # each process's own appends keep their order
            assert [e.payload["i"] for e in entries if e.payload["writer"] == writer] == list(range(PER_PROCESS))
        (result,) = await verify_journal(journal, "same")
        assert result.ok, str(result)
    finally:
        await journal.close()

"""E-05: starting an undo is a claim; two recoveries of one saga apply every undo at most once
(issue 8 item 2). Two writers race on one saga 30 times, in two tasks and in two processes; a
far-side store counts applications per idempotency key."""

from __future__ import annotations

import asyncio

import pytest

from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.undo import idempotency_key

from tests import forked
from . import claims_worker
from .claims_worker import CrashClock, crash_saga, far_side_applied, recover_once

pytestmark = pytest.mark.case("E-05")

TRIES = 30


def make_journal(backend: str, path: str, clock: CrashClock, request: object = None) -> object:
    if backend == "memory":
        return InMemoryJournal(clock=clock)
    if backend == "postgres":  # the claim rule under the advisory lock
        from sagacity_agents.backends import PostgresJournal

        return PostgresJournal(request.getfixturevalue("pg_uri"), clock=clock)
    return SqliteJournal(path, clock=clock, synchronous="NORMAL")


async def check_sagas(db_journal: object, far: str, saga_ids: list[str], how: str) -> None:
    """Every undo key applied at most once during the races; then one more pass (the same way)
    finishes whatever a refused writer left: every key applied exactly once, chains verify."""
    applied = far_side_applied(far)
    assert max(applied.values(), default=0) <= 1, {k: v for k, v in applied.items() if v > 1}
    for saga_id in saga_ids:
        entries = await db_journal.entries(saga_id)
        if not any(e.phase is Phase.SAGA_CLOSED for e in entries):
            finished = await recover_once(db_journal, far, saga_id, how)
            assert finished == ("COMPENSATED" if how == "recover" else "compensated")
        entries = await db_journal.entries(saga_id)
        assert verify_entries(saga_id, entries).ok
        if how == "recover":
            assert entries[-1].phase is Phase.SAGA_CLOSED
        claims = [e for e in entries if e.phase is Phase.COMPENSATING]
        assert len({e.write_key for e in claims}) == len(claims)  # one claim per key
    applied = far_side_applied(far)
    expected = {idempotency_key(sid, seq) for sid in saga_ids for seq in (4, 6, 8)}  # EXECUTED seqs
    assert set(applied) == expected and set(applied.values()) == {1}


@pytest.mark.parametrize("how", ["recover", "compensate"])
@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_two_tasks_recovering_one_saga_apply_each_undo_at_most_once(tmp_path, backend, how, request):
    """E-05 (tasks): two concurrent recoveries of one crashed saga in one process, 30 tries.
    ``recover``: the run lease admits one (the other is refused before writing); ``compensate``:
    the core step alone, where only the COMPENSATING claim separates the two writers."""
    far = str(tmp_path / "far.db")
    clock = CrashClock()
    journal = make_journal(backend, str(tmp_path / "j.db"), clock, request)
    saga_ids = [f"crashed-{i}" for i in range(TRIES)]
    outcomes: list[str] = []
    try:
        for saga_id in saga_ids:
            await crash_saga(journal, saga_id)
        clock.catch_up()
        for saga_id in saga_ids:
            outcomes += await asyncio.gather(*(recover_once(journal, far, saga_id, how) for _ in range(2)))
        await check_sagas(journal, far, saga_ids, how)
    finally:
        await journal.close()
    if how == "recover":
        # One recovery per try did the work; the other was refused (the lease, or the close),
        # or lost the lease it had taken after stalling past 5 s (LEASE_LOST: it stopped).
        assert outcomes.count("COMPENSATED") == TRIES, outcomes
        assert all(o.startswith("refused: SagaStateError") or o == "LEASE_LOST"
                   for o in outcomes if o != "COMPENSATED"), outcomes
    else:
        # The race is real: without a lease, writers did meet on one undo key and one was refused.
        assert "claimed-elsewhere" in outcomes, outcomes


@pytest.mark.multiprocess
@pytest.mark.parametrize("how", ["recover", "compensate"])
async def test_two_processes_recovering_one_saga_apply_each_undo_at_most_once(tmp_path, how):
    """E-05 (processes): two spawned processes recover the same 30 crashed sagas on one SQLite
    file, meeting at a barrier before each saga: every undo key is applied at most once."""
    db, far = str(tmp_path / "j.db"), str(tmp_path / "far.db")
    clock = CrashClock()
    journal = SqliteJournal(db, clock=clock, synchronous="NORMAL")
    saga_ids = [f"crashed-{i}" for i in range(TRIES)]
    for saga_id in saga_ids:
        await crash_saga(journal, saga_id)
    clock.catch_up()
    ctx = forked.context()
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=claims_worker.process_worker, args=(db, far, saga_ids, how, barrier, out))
             for _ in range(2)]
    for proc in procs:
        proc.start()
    try:
        results = [await asyncio.to_thread(out.get, True, 180) for _ in procs]
        for proc in procs:
            await asyncio.to_thread(proc.join, 60)
        assert [p.exitcode for p in procs] == [0, 0]
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    try:
        await check_sagas(journal, far, saga_ids, how)
    finally:
        await journal.close()
    flat = [o for r in results for o in r]
    assert len(flat) == 2 * TRIES
    if how == "recover":
        # One COMPENSATED per saga. The other recovery was refused, or, stalled past its 5 s
        # lease on a loaded machine, lost it to this one and stopped (LEASE_LOST, core.fence).
        assert flat.count("COMPENSATED") == TRIES, flat

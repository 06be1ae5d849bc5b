"""How often one recovery reads a saga's entries: at most twice, on every backend, for a recovery
that compensates and, per saga, for ``recover_all``. The saga is verified once; its lease, its
state checks and compensation all work on that verified ledger."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.core.signing import generate_key
from tests.backends import BACKENDS, Backend

from .claims_worker import STEPS, CrashClock, crash_saga, far_side_applied, step_agent

MOST_READS = 2
"""Reads of one saga's entries one recovery may make."""


def count_reads(journal: Any) -> Counter[str]:
    """Count, per saga id, every read of a saga's entries from ``journal``: one saga read alone,
    or one of the sagas a batched read fetched. The journal's read methods are wrapped in place,
    so every view the library puts over the journal (the fence, the signer) reads through the
    counter."""
    reads: Counter[str] = Counter()

    def alone(read: Any) -> Any:
        async def counted(saga_id: str) -> Any:
            reads[saga_id] += 1
            return await read(saga_id)
        return counted

    def batched(read: Any) -> Any:
        async def counted(saga_ids: list[str]) -> Any:
            reads.update(saga_ids)
            return await read(saga_ids)
        return counted

    journal.entries = alone(journal.entries)
    for name in ("entries_many", "rows_many"):
        if hasattr(journal, name):
            setattr(journal, name, batched(getattr(journal, name)))
    return reads


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request: pytest.FixtureRequest) -> tuple[Backend, str]:
    return request.param, request.param.location(request)


async def crashed_journal(backend: tuple[Backend, str], saga_ids: list[str], **options: Any) -> Any:
    """The backend's journal holding ``saga_ids``, each crashed after its EXECUTED steps (its
    run's lease long expired), written through a ``Sagacity`` with ``options`` (a keyring tags
    them)."""
    kind, location = backend
    clock = CrashClock()
    journal = kind.journal(location, clock=clock)
    writer = Sagacity(journal, **options).journal
    for saga_id in saga_ids:
        await crash_saga(writer, saga_id)
    clock.catch_up()
    return journal


def recovered(backend: tuple[Backend, str], tmp_path: Path, saga_ids: list[str], **options: Any) -> Counter[str]:
    """Recover ``saga_ids`` (one: ``recover``; several: ``recover_all``) after they crashed, check
    every step was undone once, and return the reads of each saga the recovery made."""

    async def main() -> Counter[str]:
        journal = await crashed_journal(backend, saga_ids, **options)
        try:
            reads = count_reads(journal)
            far = str(tmp_path / "far.db")
            sagacity = Sagacity(journal, **options)
            if len(saga_ids) == 1:
                results = [await sagacity.recover(saga_ids[0], step_agent(far))]
            else:
                outcomes = await sagacity.recover_all(step_agent(far))
                assert [sid for sid, _why, _result in outcomes] == saga_ids
                results = [result for _sid, _why, result in outcomes]
            assert [r.status for r in results] == [SagaStatus.COMPENSATED] * len(saga_ids)
            assert set(far_side_applied(far).values()) == {1}
            assert len(far_side_applied(far)) == len(STEPS) * len(saga_ids)
            return reads
        finally:
            await journal.close()

    return asyncio.run(main())


def test_a_recovery_that_compensates_reads_the_saga_at_most_twice(
    backend: tuple[Backend, str], tmp_path: Path,
) -> None:
    reads = recovered(backend, tmp_path, ["crashed"])
    assert reads["crashed"] <= MOST_READS, reads


def test_a_recovery_that_signs_a_checkpoint_reads_the_saga_at_most_twice(
    backend: tuple[Backend, str], tmp_path: Path,
) -> None:
    """The checkpoint signed at the close verifies the saga as it then stands."""
    generate_key(tmp_path / "keys", "k1")
    reads = recovered(backend, tmp_path, ["crashed"], keyring=tmp_path / "keys",
                      checkpoints=tmp_path / "checkpoints")
    assert reads["crashed"] <= MOST_READS, reads


def test_recover_all_reads_each_saga_at_most_twice(backend: tuple[Backend, str], tmp_path: Path) -> None:
    sagas = ["a", "b", "c"]
    reads = recovered(backend, tmp_path, sagas)
    assert all(reads[sid] <= MOST_READS for sid in sagas), reads


def test_recover_resolve_recover_and_close_each_read_the_saga_at_most_twice(
    backend: tuple[Backend, str], tmp_path: Path,
) -> None:
    """A call left in doubt: the recovery ends IN_DOUBT, a human answers, the next recovery
    closes the saga; and a saga kept open is closed."""

    async def main() -> list[int]:
        journal = await crashed_journal(backend, ["s"])
        try:
            await journal.append("s", Phase.INTENT, write_key="c9:intent", tool="step", call_id="c9",
                                 payload={"args": {"n": 9}, "reversibility": "compensatable"})
            await journal.append("open", Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
            reads = count_reads(journal)
            sagacity = Sagacity(journal)
            far = str(tmp_path / "far.db")
            counted = []
            first = await sagacity.recover("s", step_agent(far))
            assert first.status is SagaStatus.IN_DOUBT
            counted.append(reads.pop("s", 0))
            await sagacity.resolve("s", first.in_doubt[0].seq, ran=False, resolver="ops", reason="checked",
                                   force=True)
            counted.append(reads.pop("s", 0))
            assert (await sagacity.recover("s", step_agent(far))).status is SagaStatus.COMPENSATED
            counted.append(reads.pop("s", 0))
            assert await sagacity.close_saga("open") is SagaStatus.COMPLETED
            return [*counted, reads["open"]]
        finally:
            await journal.close()

    counted = asyncio.run(main())
    assert all(n <= MOST_READS for n in counted), counted

"""A recovery whose SAGA_FAILED was stored but whose acknowledgement was lost (the write raised
after the commit) reads the journal to see that the saga is marked failed, and goes on: the saga
is compensated and closed, as when that check read the journal (never a snapshot taken before
the write, which cannot hold it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.testing import FaultyJournal

from .claims_worker import STEPS, CrashClock, crash_saga, far_side_applied, step_agent


def test_a_saga_failed_stored_without_its_acknowledgement_does_not_leave_the_recovery_in_doubt(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        clock = CrashClock()
        inner = InMemoryJournal(clock=clock)
        await crash_saga(inner, "s")
        clock.catch_up()
        journal = FaultyJournal(inner, when=lambda a: a.phase is Phase.SAGA_FAILED, times=1,
                                after_write=True)
        far = str(tmp_path / "far.db")
        result = await Sagacity(journal).recover("s", step_agent(far))
        assert len(journal.failures) == 1  # the SAGA_FAILED was stored, then its write raised
        assert result.status is SagaStatus.COMPENSATED, (result.status, result.in_doubt)
        assert len(far_side_applied(far)) == len(STEPS)

    asyncio.run(main())

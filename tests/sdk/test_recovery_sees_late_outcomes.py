"""A recovery acts on the outcomes that landed before it compensates, late ones included.

A recovery verifies the saga, then takes its lease. The holder it took the lease from may be
stalled, not dead: its call (or its undo) still running, it writes that call's outcome *late*,
unfenced, after the recovery's RUN_STARTED. Such an outcome that lands before the recovery
compensates must be what compensation walks on, as when compensation read the journal itself:
an EXECUTED call is undone (not reported "INTENT without outcome"), and an undo attempt whose
late COMPENSATED landed is not run a second time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import InMemoryApprovalStore, Phase
from sagacity_agents.core.journal import new_claimant
from tests.backends import BACKENDS, Backend

from .claims_worker import CrashClock, far_side_applied, step_agent


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request: pytest.FixtureRequest) -> tuple[Backend, str]:
    return request.param, request.param.location(request)


class StalledHolderLands(InMemoryApprovalStore):
    """An approval store whose first ``list`` (a recovery asks it after taking the saga's lease,
    before compensating) lets the stalled holder's late entry land in the journal."""

    def __init__(self, land: Any) -> None:
        super().__init__()
        self._land = land

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        land, self._land = self._land, None
        if land is not None:
            await land()
        return await super().list(*args, **kwargs)


async def stalled_run(journal: Any, saga_id: str) -> tuple[int, int]:
    """A run whose lease expired long ago while its call ``step(1)`` ran: SAGA_OPENED,
    RUN_STARTED, INTENT (fenced). Returns (the run's seq, the INTENT's seq)."""
    await journal.append(saga_id, Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
    run = await journal.append(saga_id, Phase.RUN_STARTED, write_key="run:stalled",
                               payload={"agent": "steps", "holder": "host:1:stalled",
                                        "lease_seconds": 5.0, "took_over": None})
    intent = await journal.append(saga_id, Phase.INTENT, write_key="c1:intent", tool="step",
                                  call_id="c1", fence=run.seq,
                                  payload={"args": {"n": 1}, "reversibility": "compensatable"})
    return run.seq, intent.seq


def recover_with(backend: tuple[Backend, str], tmp_path: Path, before: Any, late: Any) -> Any:
    """Write the stalled run (plus ``before``), then recover while ``late`` lands once the
    recovery holds the lease. Returns (the result, the far side's applied undos)."""

    async def main() -> Any:
        kind, location = backend
        clock = CrashClock()
        journal = kind.journal(location, clock=clock)
        try:
            run_seq, intent_seq = await stalled_run(journal, "s")
            await before(journal, run_seq, intent_seq)
            clock.catch_up()
            far = str(tmp_path / "far.db")
            store = StalledHolderLands(lambda: late(journal, run_seq, intent_seq))
            result = await Sagacity(journal, approvals=store).recover("s", step_agent(far))
            return result, far_side_applied(far)
        finally:
            await journal.close()

    return asyncio.run(main())


def test_a_late_executed_that_lands_before_compensation_is_undone(
    backend: tuple[Backend, str], tmp_path: Path,
) -> None:
    async def nothing(journal: Any, run_seq: int, intent_seq: int) -> None:
        return None

    async def executed(journal: Any, run_seq: int, intent_seq: int) -> None:
        await journal.append("s", Phase.EXECUTED, write_key="c1:outcome", tool="step",
                             call_id="c1", fence=run_seq, late=True,
                             payload={"intent_seq": intent_seq, "result": 1})

    result, applied = recover_with(backend, tmp_path, nothing, executed)
    assert result.status is SagaStatus.COMPENSATED, (result.status, result.in_doubt)
    assert [item.call_id for item in result.report.undone] == ["c1"]
    assert list(applied.values()) == [1]


def test_an_undo_whose_late_compensated_landed_is_not_run_again(
    backend: tuple[Backend, str], tmp_path: Path,
) -> None:
    """The stalled holder's undo timed out (its in-doubt mark journaled), then ended: its late
    COMPENSATED lands after the recovery took the lease. The undo is done; it is not retried."""
    claimant = new_claimant()

    async def undo_timed_out(journal: Any, run_seq: int, intent_seq: int) -> None:
        done = await journal.append("s", Phase.EXECUTED, write_key="c1:outcome", tool="step",
                                    call_id="c1", fence=run_seq,
                                    payload={"intent_seq": intent_seq, "result": 1})
        start = await journal.append("s", Phase.COMPENSATING, write_key=f"undo:{done.seq}:1:start",
                                     tool="step", call_id="c1", fence=run_seq,
                                     payload={"target_seq": done.seq, "idempotency_key": "k",
                                              "attempt": 1, "claimant": claimant})
        await journal.append("s", Phase.COMPENSATION_FAILED, write_key=f"undo:{done.seq}:1:in-doubt",
                             tool="step", call_id="c1", fence=run_seq,
                             payload={"target_seq": done.seq, "compensating_seq": start.seq,
                                      "error": "timed out", "in_doubt": True, "timed_out": True,
                                      "cancelled": False, "undo_timeout": 1.0})

    async def compensated(journal: Any, run_seq: int, intent_seq: int) -> None:
        entries = await journal.entries("s")
        start = next(e for e in entries if e.phase is Phase.COMPENSATING)
        await journal.append("s", Phase.COMPENSATED, write_key=f"undo:{start.payload['target_seq']}:1:end",
                             tool="step", call_id="c1", fence=run_seq, late=True,
                             payload={"target_seq": start.payload["target_seq"],
                                      "compensating_seq": start.seq})

    result, applied = recover_with(backend, tmp_path, undo_timed_out, compensated)
    assert applied == {}, "the undo ran again after its late COMPENSATED landed"
    assert result.status is SagaStatus.COMPENSATED, (result.status, result.in_doubt)

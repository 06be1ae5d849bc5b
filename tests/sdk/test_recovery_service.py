"""The core recovery service used without the Agents SDK: an adapter binds its declarations with
a plain callable. A recovery handed entries that are no longer the saga's newest (the journal
changed after they were verified) does not act on them: its lease is refused on their tail, and
compensation reads and verifies the saga again."""

from __future__ import annotations

import asyncio
from typing import Any

from sagacity_agents import SagaStatus
from sagacity_agents.backends import InMemoryApprovalStore, InMemoryJournal, Phase
from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
from sagacity_agents.core.recovery import Recovery

from .claims_worker import STEPS, CrashClock, crash_saga


def undo_step(undone: list[Any]) -> Any:
    """A binder: the tool ``step``'s declaration, whose undo notes the step undone."""
    declaration = ToolDeclaration("step", Reversibility.COMPENSATABLE,
                                  undo=lambda ctx: undone.append(ctx.args["n"]))
    return lambda saga: saga.register("step", declaration)


async def crashed_with_a_call_in_flight(journal: Any, clock: CrashClock) -> None:
    await crash_saga(journal, "s")
    await journal.append("s", Phase.INTENT, write_key="c9:intent", tool="step", call_id="c9",
                         payload={"args": {"n": 9}, "reversibility": "compensatable"})
    clock.catch_up()


def test_recovery_without_the_sdk_undoes_every_step() -> None:
    async def main() -> None:
        clock = CrashClock()
        journal = InMemoryJournal(clock=clock)
        await crash_saga(journal, "s")
        clock.catch_up()
        undone: list[Any] = []
        result = await Recovery(journal, InMemoryApprovalStore()).recover("s", undo_step(undone))
        assert result.status is SagaStatus.COMPENSATED and undone == list(reversed(STEPS))

    asyncio.run(main())


def test_a_recovery_on_entries_since_outdated_reads_the_saga_again() -> None:
    async def main() -> None:
        clock = CrashClock()
        journal = InMemoryJournal(clock=clock)
        await crashed_with_a_call_in_flight(journal, clock)
        service = Recovery(journal, InMemoryApprovalStore())
        verdict, selected = await service.evidence.checked_entries(journal, "s")
        assert verdict.ok and selected[-1].phase is Phase.INTENT
        # The call in flight ends after the saga was selected: its outcome lands late.
        await journal.append("s", Phase.EXECUTED, write_key="c9:outcome", tool="step", call_id="c9",
                             payload={"intent_seq": selected[-1].seq, "result": 9})
        undone: list[Any] = []
        result = await service.recover("s", undo_step(undone), verified=selected)
        assert result.status is SagaStatus.COMPENSATED and not result.in_doubt
        assert undone == [9, *reversed(STEPS)]

    asyncio.run(main())

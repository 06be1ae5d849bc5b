"""A stalled run's late outcome that lands while a recovery compensates is never closed over.

The saga: a run booked a flight, started a hotel (INTENT) and stalled; its lease expired, and a
human answered the hotel "not run". A recovery takes the saga over and undoes the flight; while
it does, the stalled holder's hotel returns after all and its EXECUTED is journaled late (under
the old fence, unchecked), *before* the recovery's close. The recovery's close is conditional on
what its compensation read: only its own entries may follow that, so it compensates again (the
hotel is undone with its own undo data, the flight is not undone twice) and then closes; when
late outcomes keep landing it stops after three tries and leaves the saga open for ``recover``.

Every scenario runs on memory, SQLite and PostgreSQL (``tests.backends.BACKENDS``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sagacity_agents import SagaStatus
from sagacity_agents.backends import InMemoryApprovalStore, InMemoryJournal, Phase
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
from sagacity_agents.core.ledger import is_closed, reopened_by
from sagacity_agents.core.recovery import Recovery, recovery_reason
from sagacity_agents.saga import Saga
from tests.backends import BACKENDS
from tests.sdk.claims_worker import CrashClock

SAGA = "trip-late-during-close"


@pytest.fixture(params=BACKENDS, ids=str)
def journal_at(request):
    """Opens the backend's journal at this test's own location, with the given clock."""
    backend = request.param
    location = backend.location(request)
    return lambda clock: backend.journal(location, clock=clock)


@pytest.fixture(params=["apart", "shared"])
def journals(request, journal_at):
    """Opens ``(the recovery's journal, the stalled run's journal, their clock)``: two journal
    objects on one place (two processes: PostgreSQL's sole writer remembers a tail the other
    one moved), or one shared (memory always shares: one process's memory)."""

    def open_both() -> tuple[Any, Any, CrashClock]:
        clock = CrashClock()
        journal = journal_at(clock)
        apart = request.param == "apart" and not isinstance(journal, InMemoryJournal)
        return journal, journal_at(clock) if apart else journal, clock

    return open_both


async def close_both(journal: Any, stalled: Any) -> None:
    await journal.close()
    if stalled is not journal:
        await stalled.close()


class Stalled:
    """What the stalled run left: its RUN_STARTED seq (the fence of its entries) and the seqs of
    its INTENTs, by call id; :meth:`late_outcome` journals one of its calls' EXECUTED late."""

    def __init__(self, journal: Any) -> None:
        self.journal = journal
        self.fence = 0
        self.intents: dict[str, int] = {}

    async def write(self, hotels: int) -> None:
        """A flight booked (EXECUTED), then ``hotels`` hotel INTENTs with no outcome."""
        journal = self.journal
        await journal.append(SAGA, Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": {}})
        started = await journal.append(
            SAGA, Phase.RUN_STARTED, write_key="run:stalled",
            payload={"agent": "trip", "holder": "host:1:stalled", "lease_seconds": 5.0, "took_over": None})
        self.fence = started.seq
        flight = await self._intent("book_flight", "f1", {"to": "LIS"})
        await journal.append(SAGA, Phase.EXECUTED, write_key="f1:outcome", tool="book_flight",
                             call_id="f1", payload={"intent_seq": flight, "result": "F1"},
                             fence=self.fence)
        for n in range(1, hotels + 1):
            await self._intent("book_hotel", f"h{n}", {"city": f"city {n}"})

    async def _intent(self, tool: str, call_id: str, args: dict[str, Any]) -> int:
        entry = await self.journal.append(
            SAGA, Phase.INTENT, write_key=f"{call_id}:intent", tool=tool, call_id=call_id,
            payload={"args": args, "reversibility": "compensatable"}, fence=self.fence)
        self.intents[call_id] = entry.seq
        return entry.seq

    async def late_outcome(self, call_id: str) -> Any:
        """The stalled holder's EXECUTED for ``call_id``: under its own (lost) fence, marked late,
        unchecked by the fence, as ``core.fence`` writes it after a takeover."""
        return await self.journal.append(
            SAGA, Phase.EXECUTED, write_key=f"{call_id}:outcome", tool="book_hotel", call_id=call_id,
            payload={"intent_seq": self.intents[call_id], "result": f"H-{call_id}",
                     "undo_data": {"booking": f"H-{call_id}"}},
            fence=self.fence, late=True)


def trip_tools(log: list[Any], on_undo: Callable[[str], Awaitable[None]]) -> Callable[[Saga], None]:
    """A binder: the flight's and the hotel's declarations. Each undo notes what it was given
    in ``log``, then awaits ``on_undo(call id)`` (where the test lands a late outcome)."""

    async def undo_flight(ctx: Any) -> None:
        log.append(("undo flight", ctx.call_id))
        await on_undo(ctx.call_id)

    async def undo_hotel(ctx: Any) -> None:
        log.append(("undo hotel", ctx.call_id, ctx.result, ctx.undo_data))
        await on_undo(ctx.call_id)

    flight = ToolDeclaration("book_flight", Reversibility.COMPENSATABLE, undo=undo_flight)
    hotel = ToolDeclaration("book_hotel", Reversibility.COMPENSATABLE, undo=undo_hotel)

    def bind(saga: Saga) -> None:
        saga.register("book_flight", flight)
        saga.register("book_hotel", hotel)

    return bind


async def stalled_and_answered(journal: Any, stalled_journal: Any, clock: CrashClock,
                               hotels: int) -> tuple[Stalled, Recovery]:
    """The stalled run's entries (written an hour ago: its lease long expired), and a human's
    "not run" for each hotel INTENT."""
    stalled = Stalled(stalled_journal)
    await stalled.write(hotels)
    clock.catch_up()
    service = Recovery(journal, InMemoryApprovalStore())
    for n in range(1, hotels + 1):
        await service.resolve(SAGA, stalled.intents[f"h{n}"], ran=False, resolver="ops",
                              reason="no booking on the far side; its process looked gone",
                              force=True)  # answered before any recovery took the run over
    return stalled, service


async def test_a_late_outcome_landing_during_the_undo_is_undone_before_the_close(journals):
    journal, stalled_journal, clock = journals()
    try:
        stalled, service = await stalled_and_answered(journal, stalled_journal, clock, hotels=1)
        log: list[Any] = []
        landed: list[Any] = []

        async def on_undo(call_id: str) -> None:
            if call_id == "f1" and not landed:  # the hotel wakes while the flight is undone
                landed.append(await stalled.late_outcome("h1"))

        result = await service.recover(SAGA, trip_tools(log, on_undo))
        (late,) = landed
        assert result.status is SagaStatus.COMPENSATED
        # The flight once (the second pass finds it undone), the hotel with its own outcome.
        assert log == [("undo flight", "f1"), ("undo hotel", "h1", "H-h1", {"booking": "H-h1"})]
        assert sorted(i.tool for i in result.report.undone) == ["book_flight", "book_hotel"]
        (said,) = result.report.contradicted
        assert said.seq == late.seq and f"outcome (seq {late.seq})" in said.detail
        entries = await journal.entries(SAGA)
        (close,) = [e for e in entries if e.phase is Phase.SAGA_CLOSED]
        (hotel_undo,) = [e for e in entries if e.phase is Phase.COMPENSATING and e.tool == "book_hotel"]
        assert late.seq < hotel_undo.seq < close.seq and hotel_undo.payload["target_seq"] == late.seq
        assert [e.payload["status"] for e in entries if e.phase is Phase.RUN_ENDED] == ["COMPENSATED"]
        assert close.payload["report"]["contradicted"][0]["seq"] == late.seq
        assert is_closed(entries) and reopened_by(entries) is None
        assert verify_entries(SAGA, entries).ok and recovery_reason(entries) is None
    finally:
        await close_both(journal, stalled_journal)


async def test_an_entry_landing_after_the_last_undo_fails_the_conditional_close(journals, monkeypatch):
    """The late outcome lands after the recovery's last own entry, just before its RUN_ENDED:
    the journal refuses the conditional batch (``expected_seq``), nothing is written, and the
    recovery compensates again on its still-held lease."""
    journal, stalled_journal, clock = journals()
    try:
        stalled, service = await stalled_and_answered(journal, stalled_journal, clock, hotels=1)
        landed: list[Any] = []
        append = journal.append

        async def then_late(*args: Any, **kwargs: Any) -> Any:
            entry = await append(*args, **kwargs)
            if entry.phase is Phase.COMPENSATED and entry.tool == "book_flight" and not landed:
                landed.append(await stalled.late_outcome("h1"))
            return entry

        monkeypatch.setattr(journal, "append", then_late)
        log: list[Any] = []

        async def nothing(call_id: str) -> None:
            return None

        result = await service.recover(SAGA, trip_tools(log, nothing))
        (late,) = landed
        assert result.status is SagaStatus.COMPENSATED
        assert log == [("undo flight", "f1"), ("undo hotel", "h1", "H-h1", {"booking": "H-h1"})]
        entries = await journal.entries(SAGA)
        (flight_done,) = [e for e in entries if e.phase is Phase.COMPENSATED and e.tool == "book_flight"]
        assert late.seq == flight_done.seq + 1  # right after the first pass's last own entry
        ends = [e for e in entries if e.phase is Phase.RUN_ENDED]
        (close,) = [e for e in entries if e.phase is Phase.SAGA_CLOSED]
        assert len(ends) == 1 and late.seq < ends[0].seq == close.seq - 1
        assert verify_entries(SAGA, entries).ok and is_closed(entries)
    finally:
        await close_both(journal, stalled_journal)


async def test_late_outcomes_that_keep_landing_leave_the_saga_open_for_recovery(journal_at):
    """Each pass's undo lets another stalled call's outcome land: after three compensations the
    recovery ends IN_DOUBT without SAGA_CLOSED; the next recovery undoes the last one and closes."""
    clock = CrashClock()
    journal = journal_at(clock)
    try:
        stalled, service = await stalled_and_answered(journal, journal, clock, hotels=3)
        log: list[Any] = []
        wakes = {"f1": "h1", "h1": "h2", "h2": "h3"}  # each undo: the next hotel returns

        async def on_undo(call_id: str) -> None:
            if call_id in wakes:
                await stalled.late_outcome(wakes.pop(call_id))

        first = await service.recover(SAGA, trip_tools(log, on_undo))
        assert first.status is SagaStatus.IN_DOUBT
        entries = await journal.entries(SAGA)
        assert not [e for e in entries if e.phase is Phase.SAGA_CLOSED]
        assert [e.payload["status"] for e in entries if e.phase is Phase.RUN_ENDED] == ["IN_DOUBT"]
        assert "IN_DOUBT" in (recovery_reason(entries) or "")
        assert [entry[:2] for entry in log] == [("undo flight", "f1"), ("undo hotel", "h1"),
                                                 ("undo hotel", "h2")]

        second = await service.recover(SAGA, trip_tools(log, on_undo))
        assert second.status is SagaStatus.COMPENSATED
        assert [entry[:2] for entry in log][3:] == [("undo hotel", "h3")]
        assert sorted(i.call_id for i in second.report.undone) == ["f1", "h1", "h2", "h3"]
        entries = await journal.entries(SAGA)
        assert is_closed(entries) and verify_entries(SAGA, entries).ok
    finally:
        await journal.close()

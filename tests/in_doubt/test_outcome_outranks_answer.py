"""An outcome outranks an answer: a human's "not run" races a stalled body, in one process.

The scale model of ``tests/sdk/test_fencing.py``: a run books a flight, then its hotel body
blocks the run's event loop; the run's journal clock is an hour behind (an injected clock), so
its lease looks expired at once and its INTENT is an hour old (past any call deadline plus a
lease period when the human answers). A recovery in another thread takes the saga over, undoes
the flight and reports the hotel in doubt; a human answers "not run". The hotel body then wakes,
books, and journals its EXECUTED late:

* before the next recovery: that recovery pairs the INTENT with the EXECUTED (not the answer),
  undoes the hotel with the EXECUTED's own result, and its report names the contradiction;
* after a recovery closed the saga: the EXECUTED is journaled after SAGA_CLOSED (the one entry
  a closed saga accepts), the saga is REOPENED, ``recover --all`` selects it, undoes the hotel
  and closes the saga again; ``verify`` accepts that shape.
"""

from __future__ import annotations

from typing import Any

from sagacity_agents import Sagacity, SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.health import saga_health
from sagacity_agents.core.ledger import SagaLedger, is_closed, reopened_by
from sagacity_agents.core.recovery import recovery_reason
from sagacity_agents.render import saga_status
from tests.sdk.test_fencing import Trip, behind, place  # noqa: F401 - the fixture is used by name
from tests.sdk.test_fencing_exits import in_other_thread

SAGA = "trip-race"


def _journals(place):  # noqa: F811 - the fixture's value
    backend, location, options = place
    stalled = backend.journal(location, clock=behind, **options)
    shared = backend.name == "memory"  # one process's memory: both workers share the object
    return stalled, (lambda: stalled if shared else backend.journal(location, **options)), shared


async def _race(place, trip: Trip, *, close_first: bool) -> tuple[Any, Any, dict[str, Any]]:  # noqa: F811
    """The stalled run, and in another thread: a recovery (takes over, hotel in doubt), a
    human's "not run", and (``close_first``) a second recovery that closes the saga; then the
    hotel body wakes. Returns (the stalled run's result, its journal, the thread's results)."""
    stalled, other_journal, shared = _journals(place)
    said: dict[str, Any] = {}

    async def answer() -> None:
        journal = other_journal()
        try:
            assert trip.hotel_started.wait(60)
            sagacity = Sagacity(journal)
            said["first"] = first = await sagacity.recover(SAGA, trip.agent())
            (doubt,) = first.in_doubt
            # A recovery took the lease over and reported the call in doubt; the INTENT is an
            # hour old by the resolver's clock (its deadline and a lease period have passed).
            said["answer"] = await sagacity.resolve(SAGA, doubt.seq, ran=False, resolver="ops",
                                                    reason="no booking on the far side")
            if close_first:
                said["closing"] = await sagacity.recover(SAGA, trip.agent())
        finally:
            if not shared:
                await journal.close()
            trip.gate.set()  # the stalled body wakes and books

    thread, out = in_other_thread(answer)
    try:
        result = await Sagacity(stalled).run(trip.agent(), "plan my trip", saga_id=SAGA)
    finally:
        trip.gate.set()
        thread.join(60)
    assert "error" not in out, out
    return result, stalled, said


def _undone_from(entries: list[Any]) -> int:
    """The seq the hotel's undo was claimed on (its COMPENSATING's ``target_seq``): the outcome
    whose result and undo data it was given."""
    (undo,) = [e for e in entries if e.phase is Phase.COMPENSATING and e.tool == "book_hotel"]
    return undo.payload["target_seq"]


def _late_hotel(entries: list[Any]) -> Any:
    (executed,) = [e for e in entries if e.phase is Phase.EXECUTED and e.tool == "book_hotel"]
    assert executed.payload["late"] is True
    return executed


async def test_a_late_outcome_before_the_next_recovery_outranks_the_answer(place):  # noqa: F811
    trip = Trip()
    result, journal, out = await _race(place, trip, close_first=False)
    assert out["first"].status is SagaStatus.IN_DOUBT
    assert result.status is SagaStatus.LEASE_LOST and "charged" not in trip.log
    entries = await journal.entries(SAGA)
    executed, answer = _late_hotel(entries), out["answer"]
    assert answer.seq < executed.seq  # the answer came first; the outcome is kept all the same
    (contradiction,) = SagaLedger(entries).contradictions
    assert (contradiction.answer_seq, contradiction.outcome_seq) == (answer.seq, executed.seq)
    assert contradiction.intent_seq == answer.payload["target_seq"]

    second = await Sagacity(journal).recover(SAGA, trip.agent())
    assert second.status is SagaStatus.COMPENSATED
    assert trip.log.count("undo hotel") == 1 and _undone_from(await journal.entries(SAGA)) == executed.seq
    (said,) = second.report.contradicted
    assert said.tool == "book_hotel" and said.seq == executed.seq
    assert f"contradicted by the call's own outcome (seq {executed.seq})" in said.detail
    (hotel,) = [i for i in second.report.undone if i.tool == "book_hotel"]
    assert f"(seq {answer.seq})" in hotel.detail
    entries = await journal.entries(SAGA)
    assert is_closed(entries) and verify_entries(SAGA, entries).ok
    await journal.close()


async def test_a_late_outcome_after_the_close_reopens_the_saga_for_recovery(place):  # noqa: F811
    trip = Trip()
    result, journal, out = await _race(place, trip, close_first=True)
    assert out["closing"].status is SagaStatus.COMPENSATED  # closed on the word "not run"
    assert trip.log.count("undo flight") == 1 and "undo hotel" not in trip.log
    assert result.status is SagaStatus.LEASE_LOST and "charged" not in trip.log
    entries = await journal.entries(SAGA)
    executed = _late_hotel(entries)
    close, first_after = reopened_by(entries)
    assert first_after == executed.seq == entries[-1].seq and entries[close - 1].phase is Phase.SAGA_CLOSED
    assert verify_entries(SAGA, entries).ok  # the one shape a closed saga accepts
    assert saga_status(entries).startswith("REOPENED")
    assert "REOPENED" in (recovery_reason(entries) or "")
    health = await saga_health(journal)
    assert (health.reopened, health.still_dirty) == (1, 1)

    (recovered,) = await Sagacity(journal).recover_all(trip.agent())
    saga_id, why, again = recovered
    assert saga_id == SAGA and why.startswith("REOPENED")
    assert again.status is SagaStatus.COMPENSATED
    assert trip.log.count("undo hotel") == 1 and _undone_from(await journal.entries(SAGA)) == executed.seq
    assert trip.log.count("undo flight") == 1  # undone once, by the first recovery
    (said,) = again.report.contradicted
    assert f"contradicted by the call's own outcome (seq {executed.seq})" in said.detail
    entries = await journal.entries(SAGA)
    closes = [e for e in entries if e.phase is Phase.SAGA_CLOSED]
    assert len(closes) == 2 and is_closed(entries) and reopened_by(entries) is None
    assert verify_entries(SAGA, entries).ok and recovery_reason(entries) is None
    assert saga_status(entries) == "COMPENSATED"
    assert (await saga_health(journal)).reopened == 0
    await journal.close()

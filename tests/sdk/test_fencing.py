"""A run that lost its lease stops acting (issue 18, R-01): the stalled worker of the issue.

The scale model: a run books a flight, then its hotel tool blocks the run's event loop (as a
``time.sleep`` in an ``async def``, a long GC pause or a suspended VM would). The run's journal
clock is an hour behind, so its lease looks expired at once (an injected clock: no test waits
for a real lease to run out). A recovery in another thread, on its own event loop and its own
journal object, takes the saga over, undoes the flight and reports the hotel in doubt. The hotel
then returns: its EXECUTED is journaled *late*, the run starts no further body (the card is
never charged), writes no SAGA_FAILED, undo or close, and ends LEASE_LOST with LeaseLostError.
The next recovery undoes the hotel from its late entry and closes the saga; the chain verifies.
The same with two processes is in ``test_fencing_processes.py``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.errors import LeaseLostError
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.journal import utc_now
from tests.backends import BACKENDS

from .helpers import agent, scripted

SAGA = "trip-7"


def behind() -> dt.datetime:
    """The stalled run's clock: an hour behind, so every lease it writes looks expired."""
    return utc_now() - dt.timedelta(hours=1)


class Trip:
    """The tools of the trip; ``gate`` holds the hotel's body, blocking its event loop."""

    def __init__(self, sync_hotel: bool = False) -> None:
        self.log: list[str] = []
        self.hotel_started = threading.Event()
        self.gate = threading.Event()

        @function_tool
        @compensable(undo=lambda ctx: self.log.append("undo flight"))
        async def book_flight(to: str) -> str:
            self.log.append("flight")
            return "F1"

        def hotel_body() -> str:
            self.log.append("hotel started")
            self.hotel_started.set()
            assert self.gate.wait(60)  # async: blocks the whole event loop (no renewal at all)
            self.log.append("hotel")
            return "H1"

        if sync_hotel:  # a worker thread: the loop and its lease keeper run on meanwhile
            @function_tool
            @compensable(undo=lambda ctx: self.log.append("undo hotel"))
            def book_hotel(city: str) -> str:
                return hotel_body()
        else:
            @function_tool
            @compensable(undo=lambda ctx: self.log.append("undo hotel"))
            async def book_hotel(city: str) -> str:
                return hotel_body()

        @function_tool
        @compensable(undo=lambda ctx: self.log.append("refund card"))
        async def charge_card(amount: int) -> str:
            self.log.append("charged")
            return "C1"

        self.tools = (book_flight, book_hotel, charge_card)

    def agent(self) -> Any:
        return agent(scripted([("book_flight", {"to": "LIS"}, "f1")],
                              [("book_hotel", {"city": "Lisbon"}, "h1")],
                              [("charge_card", {"amount": 900}, "c1")], "done"), *self.tools)


PLACES = [(b, {}) for b in BACKENDS] + [
    (b, {"fast_outcomes": True}) for b in BACKENDS if b.name == "postgres"]
"""Each backend, and PostgreSQL with outcomes written behind their calls (``fast_outcomes``)."""


@pytest.fixture(params=PLACES, ids=lambda p: str(p[0]) + ("-fast-outcomes" if p[1] else ""))
def place(request):
    """``(backend, location, journal options)``: where both workers' journals live."""
    backend, options = request.param
    return backend, backend.location(request), options


@pytest.mark.case("R-01")
@pytest.mark.parametrize("sync_hotel", [False, True], ids=["async", "sync"])
async def test_stalled_run_never_acts_after_a_takeover(place, sync_hotel):
    backend, location, options = place
    trip = Trip(sync_hotel)
    stalled_journal = backend.journal(location, clock=behind, **options)
    shared = backend.name == "memory"  # one process's memory: both workers share the object
    recovered: dict[str, Any] = {}

    def other_worker() -> None:
        async def recover() -> None:
            journal = stalled_journal if shared else backend.journal(location)
            try:
                assert trip.hotel_started.wait(60)
                recovered["result"] = await Sagacity(journal).recover(SAGA, trip.agent())
            finally:
                if not shared:
                    await journal.close()
                trip.gate.set()  # the stalled run wakes up

        asyncio.run(recover())

    worker = threading.Thread(target=other_worker)
    worker.start()
    try:
        result = await Sagacity(stalled_journal).run(trip.agent(), "plan my trip", saga_id=SAGA)
    finally:
        trip.gate.set()
        worker.join(60)
    first = recovered["result"]
    assert first.status is SagaStatus.IN_DOUBT
    assert [item.tool for item in first.in_doubt] == ["book_hotel"]
    # the stalled holder may still be running the call: a human must not answer "not run" yet
    assert "taken over, not ended" in first.in_doubt[0].detail
    assert [item.tool for item in first.report.undone] == ["book_flight"]

    # The stalled run: its hotel's outcome is journaled late, nothing else; it stopped.
    assert result.status is SagaStatus.LEASE_LOST
    assert isinstance(result.exception, LeaseLostError)
    assert "charged" not in trip.log and trip.log.count("undo flight") == 1
    entries = await stalled_journal.entries(SAGA)
    starts = [e.seq for e in entries if e.phase is Phase.RUN_STARTED]
    hotel = [e for e in entries if e.tool == "book_hotel" and e.phase is Phase.EXECUTED]
    assert len(hotel) == 1 and hotel[0].payload["late"] is True
    assert hotel[0].payload["fence"] == starts[0] != starts[-1]
    after_takeover = [e for e in entries if e.seq > starts[1] and e.payload.get("fence") == starts[0]]
    assert after_takeover == hotel  # the late outcome is all the stale run wrote after it
    assert not [e for e in entries if e.tool == "charge_card"]
    assert [e.phase for e in entries].count(Phase.SAGA_FAILED) <= 1
    assert not [e for e in entries if e.phase is Phase.SAGA_CLOSED]
    assert verify_entries(SAGA, entries).ok

    # The next recovery reads the late outcome: the hotel is undone, the saga closed.
    journal = stalled_journal if shared else backend.journal(location)
    try:
        final = await Sagacity(journal).recover(SAGA, trip.agent())
        assert final.status is SagaStatus.COMPENSATED
        # both undone (the flight by the first recovery: never applied twice, see the log)
        assert sorted(item.tool for item in final.report.undone) == ["book_flight", "book_hotel"]
        assert not final.report.still_dirty and not final.in_doubt
        assert trip.log.count("undo hotel") == 1 and trip.log.count("undo flight") == 1
        assert verify_entries(SAGA, await journal.entries(SAGA)).ok
    finally:
        if not shared:
            await journal.close()
    await stalled_journal.close()


# --- the keeper's loss, and what renews a lease -------------------------------------------------

@pytest.mark.case("R-01")
async def test_keeper_sees_the_loss_and_the_run_stops_at_its_next_step(any_journal):
    """While a body awaits (the loop runs, the keeper beats), another run takes the saga over:
    the keeper notices, the body's outcome is written late, the run writes nothing else and
    ends LEASE_LOST, and the next call's body never starts."""
    from sagacity_agents.saga import Saga
    from sagacity_agents.sdk.tools import declaration_of

    saga = Saga(any_journal, "kept", lease_seconds=0.3)
    await saga.begin_run("a")
    taken = asyncio.Event()
    ran: list[str] = []

    @compensable(undo=lambda ctx: None)
    async def slow(n: int) -> str:
        ran.append(f"slow {n}")
        await taken.wait()
        return "ok"

    decl = declaration_of(slow)
    call = asyncio.ensure_future(saga.run_call(decl, "slow", "c1", {"n": 1}, lambda: slow(1)))
    while not ran:
        await asyncio.sleep(0.01)
    entries = await any_journal.entries("kept")
    other = await any_journal.append(
        "kept", Phase.RUN_STARTED, write_key="run:other", expected_seq=entries[-1].seq,
        payload={"holder": "other", "lease_seconds": 30.0, "agent": "b", "took_over": None})
    for _ in range(6_000):  # the keeper beats every 0.1 s; a minute at most on a loaded machine
        if saga.lease_lost is not None:
            break
        await asyncio.sleep(0.01)
    assert saga.lease_lost is not None and saga.lease_lost.current == other.seq
    taken.set()
    assert await call == "ok"  # the body's result still goes back to the model
    with pytest.raises(LeaseLostError):
        await saga.run_call(decl, "slow", "c2", {"n": 2}, lambda: slow(2))
    assert ran == ["slow 1"]
    assert await saga.finish(error=None, close=True) is SagaStatus.LEASE_LOST
    after = [e for e in await any_journal.entries("kept") if e.seq > other.seq]
    assert [(e.phase, e.payload.get("late")) for e in after] == [(Phase.EXECUTED, True)]


@pytest.mark.case("R-04b")
async def test_only_the_holders_own_entries_renew_its_lease():
    """R-04b: a RESOLVED (a human's entry) after a dead holder's last entry must not renew its
    lease, or the `recover` that `resolve` suggests is refused for another lease period."""
    from sagacity_agents.backends import InMemoryJournal
    from sagacity_agents.core.lease import lease_of
    from sagacity_agents.testing import FrozenClock

    clock = FrozenClock(tick=0.0)
    journal = InMemoryJournal(clock=clock)
    start = await journal.append("s", Phase.RUN_STARTED, write_key="run:a", expected_seq=0,
                                 payload={"holder": "a", "lease_seconds": 30.0})
    await journal.append("s", Phase.INTENT, write_key="i", payload={}, fence=start.seq)
    own = lease_of(await journal.entries("s"))
    clock.advance(25)
    await journal.append("s", Phase.RESOLVED, write_key="human", payload={"answer": "ran"})
    clock.advance(1)
    await journal.append("s", Phase.EXECUTED, write_key="late", payload={"intent_seq": 2},
                         fence=start.seq, late=True)
    later = lease_of(await journal.entries("s"))
    assert later.expires_at == own.expires_at  # neither the human's nor a late entry renewed it
    clock.advance(1)
    await journal.append("s", Phase.LEASE_RENEWED, write_key="renew", payload={"holder": "a"},
                         fence=start.seq)
    renewed = lease_of(await journal.entries("s"))
    assert (renewed.expires_at - own.expires_at).total_seconds() == pytest.approx(27)


@pytest.mark.case("R-01")
async def test_a_recovery_that_stalls_in_an_undo_stops_before_the_next(place):
    """A recovery whose undo blocks its event loop past the lease is taken over by a second
    recovery; when the undo returns its COMPENSATED is written late and the stalled recovery
    starts no further undo (its COMPENSATING is refused) and ends LEASE_LOST. The second
    recovery reported that undo in doubt and undid the rest; a third finds every undo applied
    exactly once and closes the saga."""
    from sagacity_agents.saga import Saga
    from sagacity_agents.sdk.tools import declaration_of

    backend, location, options = place
    journal = backend.journal(location, clock=behind, **options)
    shared = backend.name == "memory"
    undos: list[str] = []
    undo_started, gate = threading.Event(), threading.Event()

    async def undo_hotel(ctx: Any) -> None:
        undos.append("hotel")
        if not gate.is_set():
            undo_started.set()
            assert gate.wait(60)  # blocks the recovery's event loop

    @function_tool
    @compensable(undo=lambda ctx: undos.append("flight"))
    async def book_flight(to: str) -> str:
        return "F1"

    @function_tool
    @compensable(undo=undo_hotel)
    async def book_hotel(city: str) -> str:
        return "H1"

    tools = agent(scripted("unused"), book_flight, book_hotel)
    # A run that books both and dies (never finishes): its lease looks expired at once.
    dead = Saga(journal, "trip-r", lease_seconds=30)
    await dead.begin_run("trip")
    for name, fn, args in (("book_flight", book_flight, {"to": "LIS"}),
                           ("book_hotel", book_hotel, {"city": "Lisbon"})):
        await dead.run_call(declaration_of(fn), name, name[:1], args, lambda: asyncio.sleep(0, "ok"))
    await dead.settle()  # outcomes written behind their calls (fast_outcomes) are in
    await dead.lifecycle._keeper.stop()  # the process died: nothing renews its lease

    second: dict[str, Any] = {}

    def other_worker() -> None:
        async def recover() -> None:
            other = journal if shared else backend.journal(location, **options)
            try:
                assert undo_started.wait(60)
                second["result"] = await Sagacity(other).recover("trip-r", tools)
            finally:
                if not shared:
                    await other.close()
                gate.set()

        asyncio.run(recover())

    worker = threading.Thread(target=other_worker)
    worker.start()
    try:
        first = await Sagacity(journal).recover("trip-r", tools)
    finally:
        gate.set()
        worker.join(60)
    assert second["result"].status is SagaStatus.IN_DOUBT  # the hotel's undo: started, no outcome
    assert [i.tool for i in second["result"].in_doubt] == ["book_hotel"]
    assert first.status is SagaStatus.LEASE_LOST and isinstance(first.exception, LeaseLostError)
    assert undos == ["hotel", "flight"]  # the flight undone once, by the second recovery
    entries = await journal.entries("trip-r")
    late = [e for e in entries if e.payload.get("late")]
    assert [(e.phase, e.tool) for e in late] == [(Phase.COMPENSATED, "book_hotel")]
    final = await Sagacity(journal).recover("trip-r", tools)
    assert final.status is SagaStatus.COMPENSATED and not final.report.still_dirty
    assert undos == ["hotel", "flight"]
    assert verify_entries("trip-r", await journal.entries("trip-r")).ok
    await journal.close()

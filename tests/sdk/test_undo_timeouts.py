"""R-02 (issue 18): bounded undos. Each undo runs under its declaration's ``undo_timeout``; an
undo that times out or is cancelled is journaled in doubt, reported still dirty, the lease is
released, and ``recover`` retries it with the same idempotency key; a sync undo that finishes
late journals its end once, counted once; cancelling the caller stops compensation at the next
step boundary, writes RUN_ENDED and stops renewing the lease.

Real time matters here only through timeouts a hung undo is sure to outlast (it never returns by
itself) and a lease of 3 s; everything else waits on events, never on a sleep.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest
from agents import UserError, function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable, no_undo
from sagacity_agents.backends import Phase
from sagacity_agents.errors import DeclarationError
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.declarations import DEFAULT_UNDO_TIMEOUT
from sagacity_agents.core.lease import lease_of
from sagacity_agents.core.saga.verdict import read_verdict
from sagacity_agents.core.undo import late_undo_ends
from sagacity_agents.sdk.tools import declaration_of
from tests.backends import BACKENDS

from .helpers import agent, scripted

pytestmark = pytest.mark.case("R-02")

LEASE = 3.0
"""Lease seconds: long enough for a loaded 2-core machine, short enough to matter."""


@pytest.fixture(params=BACKENDS, ids=str)
async def journal(request):
    """A journal of each backend (``tests/backends.py``); late undo ends are written before it
    closes."""
    backend = request.param
    j = backend.journal(backend.location(request))
    yield j
    await asyncio.gather(*late_undo_ends(), return_exceptions=True)
    await j.close()


class FarSide:
    """A booking system that honours idempotency keys: an undo applied twice with one key
    cancels once."""

    def __init__(self) -> None:
        self.booked: set[int] = set()
        self.calls: list[tuple[int, str]] = []  # (booking, idempotency key) per undo call
        self.applied: Counter[str] = Counter()

    def cancel(self, n: int, key: str) -> None:
        self.calls.append((n, key))
        if not self.applied[key]:
            self.booked.discard(n)
        self.applied[key] += 1


def tools(far: FarSide, undo_for: dict, *, timeouts: dict | None = None):
    """``book_flight`` (n=1) and ``book_hotel`` (n=2), whose undos are ``undo_for[name]`` under
    ``timeouts[name]`` seconds (default: the declaration's default), and ``charge``, which
    fails."""
    timeouts = timeouts or {}

    @function_tool
    @compensable(undo=undo_for["flight"],
                 undo_timeout=timeouts.get("flight", DEFAULT_UNDO_TIMEOUT))
    async def book_flight(n: int) -> str:
        far.booked.add(n)
        return f"flight {n}"

    @function_tool
    @compensable(undo=undo_for["hotel"], undo_timeout=timeouts.get("hotel", DEFAULT_UNDO_TIMEOUT))
    async def book_hotel(n: int) -> str:
        far.booked.add(n)
        return f"hotel {n}"

    @function_tool
    @no_undo
    async def charge() -> str:
        raise RuntimeError("card declined")

    return book_flight, book_hotel, charge


def model():
    return scripted([("book_flight", {"n": 1}, "c1")], [("book_hotel", {"n": 2}, "c2")],
                    [("charge", {}, "c3")], "done")


class Reader:
    """The least a verdict reads from a saga (``VerdictSource``): here, only its journal."""

    def __init__(self, journal, saga_id: str) -> None:
        self.journal, self.saga_id = journal, saga_id
        self.status, self.failures = SagaStatus.OPEN, ()

    async def outcomes_written(self) -> None:
        return None


async def verdict_tools(journal, saga_id: str, *, attr: str) -> list[str]:
    """The tools in the saga's verdict list ``attr`` (``undone``, ``in_doubt``, ``to_undo``)."""
    return [i.tool for i in getattr(await read_verdict(Reader(journal, saga_id)), attr)]


def attempts_of(entries, tool: str) -> list:
    return [e for e in entries if e.phase is Phase.COMPENSATING and e.tool == tool]


async def test_hung_undo_with_the_caller_cancelled_releases_the_lease_and_recover_finishes(journal):
    """The hotel's undo hangs; the caller gives up while it runs. Compensation stops there: the
    hung undo is journaled in doubt (cancelled), the flight's undo does not start, RUN_ENDED is
    written at once (well within one lease period) and nothing renews the lease after it. A
    later ``recover`` is not refused: it retries the hotel's undo with the same idempotency key
    and runs the flight's, and the saga closes COMPENSATED."""
    far = FarSide()
    started, hang = asyncio.Event(), asyncio.Event()
    recovering = asyncio.Event()  # (not a bool: a captured plain value is part of the tool's id)

    async def cancel_hotel(ctx):
        if not recovering.is_set():
            started.set()
            await hang.wait()  # never set: a hung undo
        far.cancel(2, ctx.idempotency_key)

    undo_for = {"flight": lambda ctx: far.cancel(1, ctx.idempotency_key), "hotel": cancel_hotel}
    sagacity = Sagacity(journal, lease_seconds=LEASE)
    task = asyncio.create_task(sagacity.run(agent(model(), *tools(far, undo_for)), "trip"))
    await asyncio.wait_for(started.wait(), 30)
    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Released at once: not after the hung undo's 60 s timeout (half of it is a bound no loaded
    # machine reaches; RUN_ENDED is checked below).
    assert time.monotonic() - cancelled_at < DEFAULT_UNDO_TIMEOUT / 2

    (saga_id,) = await journal.saga_ids()
    entries = await journal.entries(saga_id)
    assert entries[-1].phase is Phase.RUN_ENDED
    assert entries[-1].payload["status"] == "COMPENSATION_FAILED"
    assert lease_of(entries).ended
    (mark,) = [e for e in entries if e.phase is Phase.COMPENSATION_FAILED]
    assert mark.tool == "book_hotel" and mark.write_key.endswith(":1:in-doubt")
    assert mark.payload["in_doubt"] is True and mark.payload["cancelled"] is True
    assert mark.payload["timed_out"] is False
    assert attempts_of(entries, "book_flight") == []  # the next step never started
    assert far.booked == {1, 2}
    # Nothing renews the lease any more: a keeper would have written within a third of it.
    await asyncio.sleep(LEASE / 3 + 0.5)
    assert len(await journal.entries(saga_id)) == len(entries)
    assert await verdict_tools(journal, saga_id, attr="in_doubt") == ["book_hotel"]
    assert await verdict_tools(journal, saga_id, attr="to_undo") == ["book_flight"]

    recovering.set()
    recovered = await sagacity.recover(saga_id, agent(scripted(), *tools(far, undo_for)))
    assert recovered.status is SagaStatus.COMPENSATED, recovered.report
    assert far.booked == set()
    assert [i.tool for i in recovered.report.undone] == ["book_hotel", "book_flight"]
    entries = await journal.entries(saga_id)
    hotel = attempts_of(entries, "book_hotel")
    assert [a.payload["attempt"] for a in hotel] == [1, 2]
    assert hotel[0].payload["idempotency_key"] == hotel[1].payload["idempotency_key"]
    assert far.calls == [(2, hotel[0].payload["idempotency_key"]), (1, far.calls[1][1])]
    # The cancelled run renewed nothing after its RUN_ENDED: every later renewal is the recovery's.
    first_end = next(e for e in entries if e.phase is Phase.RUN_ENDED)
    holder = first_end.payload["holder"]
    assert not [e for e in entries if e.seq > first_end.seq and e.phase is Phase.LEASE_RENEWED
                and e.payload.get("holder") == holder]
    assert entries[-1].phase is Phase.SAGA_CLOSED and verify_entries(saga_id, entries).ok


async def test_an_undo_past_its_timeout_is_in_doubt_the_walk_goes_on_and_recover_retries_it(journal):
    """No caller gives up here: the hotel's undo outlasts its ``undo_timeout``. It is cancelled,
    journaled in doubt (timed out), reported still dirty; the flight's undo still runs; the run
    ends IN_DOUBT and releases the lease. ``recover`` retries it (same key) and closes."""
    far = FarSide()
    keys: list[str] = []
    recovering = asyncio.Event()

    async def cancel_hotel(ctx):
        keys.append(ctx.idempotency_key)
        if not recovering.is_set():
            await asyncio.Event().wait()  # hangs until cancelled
        far.cancel(2, ctx.idempotency_key)

    undo_for = {"flight": lambda ctx: far.cancel(1, ctx.idempotency_key), "hotel": cancel_hotel}
    sagacity = Sagacity(journal, lease_seconds=LEASE)
    first = await sagacity.run(agent(model(), *tools(far, undo_for, timeouts={"hotel": 0.5})), "trip")
    assert first.status is SagaStatus.IN_DOUBT
    assert [i.tool for i in first.report.undone] == ["book_flight"]
    (doubt,) = first.report.in_doubt
    assert doubt.tool == "book_hotel" and "timed out after 0.5 s" in doubt.detail
    assert "same idempotency key" in doubt.detail
    assert [i.tool for i in first.report.still_dirty] == ["book_hotel"]
    assert far.booked == {2}
    entries = await journal.entries(first.saga_id)
    (mark,) = [e for e in entries if e.phase is Phase.COMPENSATION_FAILED]
    assert mark.payload["timed_out"] is True and mark.payload["undo_timeout"] == 0.5
    assert entries[-1].phase is Phase.RUN_ENDED and lease_of(entries).ended

    recovering.set()
    recovered = await sagacity.recover(first.saga_id, agent(scripted(), *tools(far, undo_for)))
    assert recovered.status is SagaStatus.COMPENSATED and far.booked == set()
    assert [i.tool for i in recovered.report.undone] == ["book_hotel", "book_flight"]
    assert len(keys) == 2 and keys[0] == keys[1]


async def test_a_sync_undo_finishing_late_is_journaled_once_and_not_undone_again(journal):
    """A sync undo cannot be killed: it outlasts its timeout (in doubt, the run ends IN_DOUBT),
    then returns. Its end is journaled once, as the outcome of its own attempt (write key
    ``undo:SEQ:1:end``, ``after_in_doubt``); the recovery that reads it afterwards does not run
    the undo again and reports the hotel undone once."""
    far = FarSide()
    release = threading.Event()

    def cancel_hotel(ctx):
        release.wait(30)  # blocked past its timeout, until the test lets it finish
        far.cancel(2, ctx.idempotency_key)

    undo_for = {"flight": lambda ctx: far.cancel(1, ctx.idempotency_key), "hotel": cancel_hotel}
    sagacity = Sagacity(journal, lease_seconds=LEASE)
    try:
        first = await sagacity.run(agent(model(), *tools(far, undo_for, timeouts={"hotel": 0.5})),
                                   "trip")
    finally:
        release.set()
    assert first.status is SagaStatus.IN_DOUBT
    assert [i.tool for i in first.report.in_doubt] == ["book_hotel"]
    await _late_end_written(journal, first.saga_id, "book_hotel")
    await asyncio.gather(*late_undo_ends())
    entries = await journal.entries(first.saga_id)
    ends = [e for e in entries if e.tool == "book_hotel"
            and e.phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED)]
    assert [(e.phase, e.write_key.rsplit(":", 2)[-2:]) for e in ends] == [
        (Phase.COMPENSATION_FAILED, ["1", "in-doubt"]), (Phase.COMPENSATED, ["1", "end"])]
    assert ends[1].payload["after_in_doubt"] is True and "late" not in ends[1].payload
    assert far.calls == [(1, far.calls[0][1]),
                         (2, attempts_of(entries, "book_hotel")[0].payload["idempotency_key"])]
    assert await verdict_tools(journal, first.saga_id, attr="undone") == ["book_flight", "book_hotel"]
    assert await verdict_tools(journal, first.saga_id, attr="in_doubt") == []

    recovered = await sagacity.recover(first.saga_id, agent(scripted(), *tools(far, undo_for)))
    assert recovered.status is SagaStatus.COMPENSATED, recovered.report
    assert len(far.calls) == 2  # the flight's and the hotel's: the late end read first, never undone again
    assert [i.tool for i in recovered.report.undone] == ["book_hotel", "book_flight"]
    entries = await journal.entries(first.saga_id)
    assert len(attempts_of(entries, "book_hotel")) == 1
    closed = entries[-1]
    assert closed.phase is Phase.SAGA_CLOSED
    assert [r["tool"] for r in closed.payload["report"]["undone"]] == ["book_hotel", "book_flight"]
    assert verify_entries(first.saga_id, entries).ok


async def test_a_late_end_landing_after_the_retry_is_written_late_and_counted_once(journal):
    """The other order: a recovery retries the timed-out sync undo (attempt 2, same key) before
    attempt 1 returns; attempt 1's end then lands while the recovery holds the saga, so it is
    written late, under attempt 1's end key. Both attempts reached the far side with one key
    (applied once there); the journal holds two COMPENSATED for the hotel, one per attempt; the
    recovery's report and its SAGA_CLOSED list the hotel undone once."""
    far = FarSide()
    release = threading.Event()
    hotel_calls: list[str] = []
    flight_gate, flight_started = asyncio.Event(), asyncio.Event()
    recovering = asyncio.Event()

    def cancel_hotel(ctx):
        hotel_calls.append(ctx.idempotency_key)
        if len(hotel_calls) == 1:
            release.wait(30)
        far.cancel(2, ctx.idempotency_key)

    async def cancel_flight(ctx):
        if not recovering.is_set():
            raise RuntimeError("airline down")  # left for the recovery
        flight_started.set()
        await flight_gate.wait()
        far.cancel(1, ctx.idempotency_key)

    undo_for = {"flight": cancel_flight, "hotel": cancel_hotel}
    sagacity = Sagacity(journal, lease_seconds=LEASE)
    try:
        first = await sagacity.run(agent(model(), *tools(far, undo_for, timeouts={"hotel": 0.5})),
                                   "trip")
        assert first.status is SagaStatus.COMPENSATION_FAILED
        recovering.set()
        recovery = asyncio.create_task(sagacity.recover(
            first.saga_id, agent(scripted(), *tools(far, undo_for))))
        await asyncio.wait_for(flight_started.wait(), 30)  # the hotel's retry has ended
    finally:
        release.set()  # attempt 1 returns now, while the recovery holds the lease
    late = await _late_end_written(journal, first.saga_id, "book_hotel", attempt=1)
    assert late.payload["late"] is True and late.payload["after_in_doubt"] is True
    flight_gate.set()
    recovered = await recovery
    assert recovered.status is SagaStatus.COMPENSATED and far.booked == set()
    assert [i.tool for i in recovered.report.undone] == ["book_hotel", "book_flight"]
    hotel_keys = {key for n, key in far.calls if n == 2}
    assert len(hotel_calls) == 2 and len(hotel_keys) == 1 and far.applied[hotel_keys.pop()] == 2
    entries = await journal.entries(first.saga_id)
    done = [e for e in entries if e.phase is Phase.COMPENSATED and e.tool == "book_hotel"]
    assert sorted(e.write_key.split(":")[2] for e in done) == ["1", "2"]
    assert await verdict_tools(journal, first.saga_id, attr="undone") == ["book_flight", "book_hotel"]
    closed = entries[-1]
    assert closed.phase is Phase.SAGA_CLOSED and closed.payload["status"] == "COMPENSATED"
    assert [r["tool"] for r in closed.payload["report"]["undone"]] == ["book_hotel", "book_flight"]
    assert verify_entries(first.saga_id, entries).ok


async def test_a_cancelled_recovery_ends_its_run_and_the_next_one_finishes():
    """Cancelling ``recover`` itself (no hooks around it) while an undo hangs: the undo is
    journaled in doubt (cancelled), the recovery's run ends IN_DOUBT (RUN_ENDED) and the next
    recovery, not refused, retries it."""
    from sagacity_agents.backends import InMemoryJournal

    journal = InMemoryJournal()
    far = FarSide()
    started = asyncio.Event()
    mode = {"hotel": "fail"}

    async def cancel_hotel(ctx):
        if mode["hotel"] == "fail":
            raise RuntimeError("hotel system down")
        if mode["hotel"] == "hang":
            started.set()
            await asyncio.Event().wait()
        far.cancel(2, ctx.idempotency_key)

    undo_for = {"flight": lambda ctx: far.cancel(1, ctx.idempotency_key), "hotel": cancel_hotel}
    sagacity = Sagacity(journal, lease_seconds=LEASE)
    first = await sagacity.run(agent(model(), *tools(far, undo_for)), "trip")
    assert first.status is SagaStatus.COMPENSATION_FAILED
    mode["hotel"] = "hang"
    recovery = asyncio.create_task(sagacity.recover(first.saga_id, agent(scripted(), *tools(far, undo_for))))
    await asyncio.wait_for(started.wait(), 30)
    recovery.cancel()
    with pytest.raises(asyncio.CancelledError):
        await recovery
    entries = await journal.entries(first.saga_id)
    assert entries[-1].phase is Phase.RUN_ENDED and entries[-1].payload["status"] == "IN_DOUBT"
    mark = [e for e in entries if e.phase is Phase.COMPENSATION_FAILED][-1]
    assert mark.payload["cancelled"] is True and mark.payload["in_doubt"] is True
    mode["hotel"] = "work"
    recovered = await sagacity.recover(first.saga_id, agent(scripted(), *tools(far, undo_for)))
    assert recovered.status is SagaStatus.COMPENSATED and far.booked == set()


async def test_a_human_may_answer_a_timed_out_undo():
    """A timed-out undo is in doubt: ``resolve`` accepts an answer for it (it ran), and the
    next recovery does not run it again."""
    from sagacity_agents.backends import InMemoryJournal

    journal = InMemoryJournal()
    far = FarSide()
    runs: list[str] = []

    async def cancel_hotel(ctx):
        runs.append(ctx.idempotency_key)
        await asyncio.Event().wait()

    undo_for = {"flight": lambda ctx: far.cancel(1, ctx.idempotency_key), "hotel": cancel_hotel}
    sagacity = Sagacity(journal, lease_seconds=LEASE)
    first = await sagacity.run(agent(model(), *tools(far, undo_for, timeouts={"hotel": 0.3})), "trip")
    (doubt,) = first.report.in_doubt
    await sagacity.resolve(first.saga_id, doubt.seq, ran=True, resolver="ops", reason="checked the PMS",
                           force=True)
    recovered = await sagacity.recover(first.saga_id, agent(scripted(), *tools(far, undo_for)))
    assert recovered.status is SagaStatus.COMPENSATED and len(runs) == 1


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "60"])
def test_undo_timeout_is_checked_at_declaration(bad):
    with pytest.raises(DeclarationError, match="undo_timeout") as raised:
        compensable(undo=lambda ctx: None, undo_timeout=bad)(lambda n: n)
    assert isinstance(raised.value, UserError)


def test_undo_timeout_defaults_to_60_seconds():
    assert DEFAULT_UNDO_TIMEOUT == 60.0

    @compensable(undo=lambda ctx: None)
    def book(n: int) -> int:
        return n

    assert declaration_of(book).undo_timeout == 60.0


async def _late_end_written(journal, saga_id: str, tool: str, *, attempt: int = 1):
    """The real end of ``tool``'s undo attempt ``attempt`` once journaled (polled: it is written
    by a thread's callback; 30 s at most)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for entry in await journal.entries(saga_id):
            if entry.tool == tool and entry.write_key.endswith(f":{attempt}:end"):
                return entry
        await asyncio.sleep(0.02)
    raise AssertionError(f"the late end of {tool}'s undo attempt {attempt} was never journaled")


async def _ledger_saga(*ends_of_attempt_1: tuple[Phase, dict]):
    """A saga by hand: one compensatable call, EXECUTED, its undo's attempt 1, then
    ``ends_of_attempt_1`` in order: outcomes of attempt 1, or (COMPENSATING) attempt 2."""
    from sagacity_agents.backends import InMemoryJournal

    journal = InMemoryJournal()
    sid = "ledger"
    intent = await journal.append(sid, Phase.INTENT, write_key="i", tool="book_hotel", call_id="c",
                                  payload={"args": {"n": 2}, "reversibility": "compensatable"})
    done = await journal.append(sid, Phase.EXECUTED, write_key="e", tool="book_hotel", call_id="c",
                                payload={"intent_seq": intent.seq})
    first = await journal.append(sid, Phase.COMPENSATING, write_key="u1", tool="book_hotel",
                                 call_id="c", payload={"target_seq": done.seq, "attempt": 1,
                                                       "claimant": "a"})
    for n, (phase, extra) in enumerate(ends_of_attempt_1):
        if phase is Phase.COMPENSATING:
            await journal.append(sid, phase, write_key="u2", tool="book_hotel", call_id="c",
                                 payload={"target_seq": done.seq, "attempt": 2, "claimant": "b"})
            continue
        await journal.append(sid, phase, write_key=f"end{n}", tool="book_hotel", call_id="c",
                             payload={"target_seq": done.seq, "compensating_seq": first.seq, **extra})
    return journal, sid


MARK = (Phase.COMPENSATION_FAILED, {"in_doubt": True, "timed_out": True, "error": "timed out"})
LATE_OK = (Phase.COMPENSATED, {"after_in_doubt": True})
LATE_FAILED = (Phase.COMPENSATION_FAILED, {"after_in_doubt": True, "error": "refused"})
ATTEMPT_2 = (Phase.COMPENSATING, {})


@pytest.mark.parametrize(("ends", "state"), [
    ((MARK,), "timed_out"),                      # stopped waiting for: recovery retries it
    ((MARK, LATE_OK), "undone"),                 # its late end says it worked
    ((LATE_OK, MARK), "undone"),                 # the late end may land before the mark
    ((MARK, LATE_FAILED), "failed"),             # its late end says it failed: retried
    ((MARK, ATTEMPT_2), "in_doubt"),             # attempt 2 started, no outcome: a human
    ((MARK, ATTEMPT_2, LATE_FAILED), "in_doubt"),  # attempt 1's late end hides nothing
    ((MARK, ATTEMPT_2, LATE_OK), "undone"),      # attempt 1 worked after all
], ids=["mark", "mark+ok", "ok+mark", "mark+failed", "mark+retry", "mark+retry+late-failed",
        "mark+retry+late-ok"])
async def test_undo_outcomes_are_paired_with_their_attempt_not_counted(ends, state):
    """Two outcomes of one attempt (its in-doubt mark, then its late end) never stand in for the
    missing outcome of a later attempt, and a COMPENSATED of any attempt means undone; what
    ``compensate`` then does follows."""
    from sagacity_agents.core.compensation import SagaLedger, compensate

    journal, sid = await _ledger_saga(*ends)
    (call,) = SagaLedger(await journal.entries(sid)).calls.values()
    assert SagaLedger.undo_state(call)[0].value == state
    runs: list[str] = []

    @compensable(undo=lambda ctx: runs.append(ctx.idempotency_key), declaration_id="ledger-hotel")
    def book_hotel(n: int) -> str:
        return "booked"

    report = await compensate(journal, sid, {"book_hotel": declaration_of(book_hotel)})
    if state in ("timed_out", "failed"):  # retried, with the key of every attempt
        assert len(runs) == 1 and [i.tool for i in report.undone] == ["book_hotel"]
    else:
        assert runs == []
        assert [i.tool for i in (report.undone if state == "undone" else report.in_doubt)] == [
            "book_hotel"]

"""T-02, the append rule, fencing and the run lease (core.journal, core.fence, core.lease): each
refusal reached alone, told apart by its error class or code."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.core.fence import FencedJournal
from sagacity_agents.core.journal import AppendRequest
from sagacity_agents.core.lease import Lease, acquire_lease
from sagacity_agents.errors import (
    ClaimTakenError,
    JournalClosedError,
    JournalConflictError,
    LeaseLostError,
    SagaStateError,
)
from sagacity_agents.testing import FrozenClock

from .support import SAGA, journal_of

pytestmark = pytest.mark.case("T-02")


async def leased() -> tuple[InMemoryJournal, int]:
    """A saga with a lease taken (its RUN_STARTED seq returned)."""
    journal = InMemoryJournal()
    await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open")
    started = await acquire_lease(journal, SAGA, holder="h1", seconds=30, agent="a")
    return journal, started.seq


async def test_an_append_under_a_lost_fence_is_refused_as_lease_lost():
    journal, run = await leased()
    assert (await journal.append(SAGA, Phase.INTENT, write_key="i", fence=run)).seq == 3
    with pytest.raises(LeaseLostError) as lost:
        await journal.append(SAGA, Phase.INTENT, write_key="j", fence=run - 1)
    assert (lost.value.fence, lost.value.current) == (run - 1, run)
    assert f"the saga's lease is now RUN_STARTED seq {run}:" in str(lost.value)
    assert len(await journal.entries(SAGA)) == 3
    with pytest.raises(LeaseLostError) as none:  # a fence, and no run ever started
        await journal.append("unleased", Phase.INTENT, write_key="j", fence=1)
    assert none.value.current is None and "the saga's lease is now no run's:" in str(none.value)


async def test_a_late_append_is_not_fenced_and_the_fence_is_checked_before_the_close():
    journal, run = await leased()
    late = await journal.append(SAGA, Phase.EXECUTED, write_key="e", fence=run + 7, late=True,
                                payload={"intent_seq": 1})
    assert late.seq == 3
    await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="close", fence=run)
    with pytest.raises(LeaseLostError):
        await journal.append(SAGA, Phase.INTENT, write_key="j", fence=run + 7)
    with pytest.raises(JournalClosedError):
        await journal.append(SAGA, Phase.INTENT, write_key="k", fence=run)


def test_only_a_fenced_append_that_is_not_late_checks_the_fence():
    req = AppendRequest(SAGA, Phase.INTENT, "k")
    assert not req.checks_fence
    assert AppendRequest(SAGA, Phase.INTENT, "k", fence=0).checks_fence
    assert not AppendRequest(SAGA, Phase.INTENT, "k", fence=2, late=True).checks_fence


async def test_a_closed_saga_refuses_as_closed_and_a_moved_tail_as_a_conflict():
    journal, _ = await journal_of((Phase.SAGA_OPENED, {}))
    with pytest.raises(JournalConflictError) as conflict:
        await journal.append(SAGA, Phase.INTENT, write_key="x", expected_seq=0)
    assert not isinstance(conflict.value, (JournalClosedError, ClaimTakenError, LeaseLostError))
    assert "ends at seq 1, not 0:" in str(conflict.value)
    with pytest.raises(JournalConflictError) as empty:
        await journal.append("empty", Phase.INTENT, write_key="x", expected_seq=4)
    assert "ends at seq 0, not 4:" in str(empty.value)
    second = await journal.append(SAGA, Phase.INTENT, write_key="y", expected_seq=1)
    assert (second.seq, second.prev_hash) == (2, (await journal.entries(SAGA))[0].hash)
    fresh = await journal.append("other", Phase.SAGA_OPENED, write_key="o", expected_seq=0)
    assert fresh.seq == 1
    await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="c")
    with pytest.raises(JournalClosedError) as closed:
        await journal.append(SAGA, Phase.INTENT, write_key="z")
    assert "(SAGA_CLOSED at seq 3)" in str(closed.value)


async def fenced(journal: InMemoryJournal, fence: int | None):
    lost: list[LeaseLostError] = []
    notes: list[str] = []
    return FencedJournal(journal, SAGA, lambda: fence, lost.append, notes.append), lost, notes


async def test_the_fenced_view_fences_its_saga_only_and_never_run_started():
    journal, run = await leased()
    view, lost, _ = await fenced(journal, run - 1)
    assert (await view.append("other", Phase.SAGA_OPENED, write_key="o")).seq == 1
    assert (await view.append(SAGA, Phase.INTENT, write_key="own", fence=run)).seq == 3
    with pytest.raises(LeaseLostError):
        await view.append(SAGA, Phase.INTENT, write_key="i")
    assert len(lost) == 1
    taken = await view.append(SAGA, Phase.RUN_STARTED, write_key="r",
                              payload={"holder": "h2", "lease_seconds": 5, "agent": "a"})
    assert taken.seq == 4
    unfenced, _, _ = await fenced(journal, None)
    assert (await unfenced.append(SAGA, Phase.INTENT, write_key="free")).seq == 5


async def test_a_lost_lease_writes_the_own_outcome_late_and_nothing_else():
    journal, run = await leased()
    view, lost, notes = await fenced(journal, run - 1)  # a fence that is not the saga's lease
    executed = await view.append(SAGA, Phase.EXECUTED, write_key="e", payload={"intent_seq": 2})
    undone = await view.append(SAGA, Phase.COMPENSATED, write_key="u", payload={"compensating_seq": 2})
    assert (executed.seq, undone.seq) == (3, 4) and len(lost) == 2
    for phase, payload in ((Phase.INTENT, {"intent_seq": 2}), (Phase.EXECUTED, {"intent_seq": True}),
                           (Phase.EXECUTED, {"compensating_seq": 2}), (Phase.COMPENSATED, {"intent_seq": 2}),
                           (Phase.EXECUTED, None)):
        with pytest.raises(LeaseLostError):
            await view.append(SAGA, phase, write_key=f"w{phase.value}{payload}", payload=payload)
    assert len(lost) == 7 and notes == [] and len(await journal.entries(SAGA)) == 4
    await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="close")
    with pytest.raises(JournalClosedError):
        await view.append(SAGA, Phase.EXECUTED, write_key="after", payload={"intent_seq": 2})
    assert len(notes) == 1 and "could not be journaled, even late" in notes[0]


async def test_lease_refusals_each_named():
    journal, _ = await leased()
    with pytest.raises(SagaStateError) as held:
        await acquire_lease(journal, SAGA, holder="h2", seconds=30, agent="b")
    assert held.value.code == "LEASE_HELD"
    again = await acquire_lease(journal, SAGA, holder="h1", seconds=30, agent="a")
    assert again.payload["took_over"] is None
    seen: list[int] = []
    with pytest.raises(ValueError):
        await acquire_lease(journal, SAGA, holder="h1", seconds=0, agent="a")
    await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="close")
    with pytest.raises(SagaStateError) as closed:
        await acquire_lease(journal, SAGA, holder="h3", seconds=30, agent="c", check=lambda e: seen.append(len(e)))
    assert closed.value.code == "SAGA_CLOSED" and seen == []


async def test_an_expired_lease_is_taken_over_and_journaled():
    now = dt.datetime.now(dt.UTC)
    clock = FrozenClock(now - dt.timedelta(hours=1))  # h1 took its lease an hour ago
    journal = InMemoryJournal(clock=clock)
    await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open")
    first = await acquire_lease(journal, SAGA, holder="h1", seconds=0.01, agent="a")
    clock.set(now)
    checked: list[int] = []
    second = await acquire_lease(journal, SAGA, holder="h2", seconds=30, agent="b",
                                 check=lambda entries: checked.append(len(entries)))
    assert checked == [2] and second.seq == 3
    assert second.payload["took_over"]["holder"] == "h1"
    assert second.payload["took_over"]["run_seq"] == first.seq


async def test_a_check_refusal_writes_nothing_and_an_ended_lease_is_not_taken_over():
    journal, _ = await leased()
    await journal.append(SAGA, Phase.RUN_ENDED, write_key="end", payload={"holder": "h1"})

    def refuse(entries):
        raise SagaStateError("no", code="REFUSED_BY_CHECK")

    with pytest.raises(SagaStateError) as refused:
        await acquire_lease(journal, SAGA, holder="h2", seconds=30, agent="b", check=refuse)
    assert refused.value.code == "REFUSED_BY_CHECK" and len(await journal.entries(SAGA)) == 3
    taken = await acquire_lease(journal, SAGA, holder="h2", seconds=30, agent="b")
    assert taken.payload["took_over"] is None


class RacingJournal(InMemoryJournal):
    """A memory journal where another writer appends right after the lease taker's read."""

    def __init__(self, *races) -> None:
        super().__init__()
        self.races = list(races)
        self.reads = 0

    async def entries(self, saga_id):
        self.reads += 1
        read = await super().entries(saga_id)
        if self.races:
            await self.races.pop(0)(self)
        return read


async def test_a_lease_opening_a_saga_writes_both_in_one_batch_without_reading():
    journal = RacingJournal()
    started = await acquire_lease(journal, SAGA, holder="h1", seconds=30, agent="a",
                                  opening={"phase": Phase.SAGA_OPENED, "write_key": "open"})
    assert started.seq == 2 and journal.reads == 0
    assert [e.phase for e in await journal.entries(SAGA)] == [Phase.SAGA_OPENED, Phase.RUN_STARTED]
    assert re.fullmatch(r"run:h1:[0-9a-f]{8}", started.write_key)


async def test_a_lease_on_a_saga_with_no_entry_starts_it():
    started = await acquire_lease(InMemoryJournal(), "bare", holder="h1", seconds=30, agent="a")
    assert started.seq == 1


async def test_a_write_in_between_is_read_again_and_a_close_in_between_refuses():
    async def intent(journal):
        await InMemoryJournal.append(journal, SAGA, Phase.INTENT, write_key="racer")

    async def close(journal):
        await InMemoryJournal.append(journal, SAGA, Phase.SAGA_CLOSED, write_key="closer")

    journal = RacingJournal(intent)
    await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open")
    started = await acquire_lease(journal, SAGA, holder="h1", seconds=30, agent="a")
    assert (started.seq, journal.reads) == (3, 2)
    closing = RacingJournal(close)
    await closing.append(SAGA, Phase.SAGA_OPENED, write_key="open")
    with pytest.raises(SagaStateError) as closed:
        await acquire_lease(closing, SAGA, holder="h1", seconds=30, agent="a")
    assert closed.value.code == "SAGA_CLOSED" and isinstance(closed.value.__cause__, JournalClosedError)


async def test_a_saga_written_to_without_pause_is_too_busy():
    async def intent(journal):
        await InMemoryJournal.append(journal, SAGA, Phase.INTENT, write_key=f"racer{journal.reads}")

    journal = RacingJournal(*[intent] * 60)
    await journal.append(SAGA, Phase.SAGA_OPENED, write_key="open")
    with pytest.raises(SagaStateError) as busy:
        await acquire_lease(journal, SAGA, holder="h1", seconds=30, agent="a")
    assert busy.value.code == "LEASE_BUSY" and journal.reads == 50


def test_a_lease_is_held_until_it_expires_or_ends():
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    lease = Lease("h", 1, 10.0, at, False)
    assert lease.held(at - dt.timedelta(microseconds=1))
    assert not lease.held(at)
    assert not Lease("h", 1, 10.0, at, True).held(at - dt.timedelta(seconds=5))
    assert Lease("h", 1, 10.0, dt.datetime.max.replace(tzinfo=dt.UTC), False).held()

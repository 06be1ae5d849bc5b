"""sagacity_agents.testing: FrozenClock and FaultyJournal, alone and under a saga."""

from __future__ import annotations

import asyncio
import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from sagacity_agents.core.chain import verify_journal
from sagacity_agents.core.declarations import Reversibility, ToolDeclaration
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.journal import Journal
from sagacity_agents.backends.memory.journal import InMemoryJournal
from sagacity_agents.core.saga import Saga
from sagacity_agents.backends.sqlite.journal import SqliteJournal
from sagacity_agents.errors import EncodingError, JournalWriteError
from sagacity_agents.testing import (
    DEFAULT_START,
    FaultyJournal,
    FrozenClock,
    make_failing,
)

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")


# --- FrozenClock ----------------------------------------------------------------------------


def test_frozen_clock_stands_still():
    clock = FrozenClock()
    assert clock() == clock() == DEFAULT_START == dt.datetime(2026, 1, 1, tzinfo=UTC)
    assert clock.calls == 2


def test_frozen_clock_advance_and_set():
    clock = FrozenClock(dt.datetime(2026, 5, 1, tzinfo=UTC))
    assert clock.advance(1.5) == dt.datetime(2026, 5, 1, 0, 0, 1, 500000, tzinfo=UTC)
    assert clock() == dt.datetime(2026, 5, 1, 0, 0, 1, 500000, tzinfo=UTC)
    clock.advance(-3600)
    assert clock() == dt.datetime(2026, 4, 30, 23, 0, 1, 500000, tzinfo=UTC)
    clock.set(dt.datetime(2030, 1, 1, tzinfo=BERLIN))
    assert clock().tzinfo is BERLIN
    assert clock.now == dt.datetime(2029, 12, 31, 23, 0, tzinfo=UTC)


def test_frozen_clock_tick():
    clock = FrozenClock(tick=0.25)
    assert [clock().microsecond for _ in range(4)] == [0, 250000, 500000, 750000]
    assert clock.now.second == 1


def test_frozen_clock_moves_in_absolute_time_across_dst():
    clock = FrozenClock(dt.datetime(2026, 3, 29, 1, 30, tzinfo=BERLIN))  # 02:00 -> 03:00 that night
    clock.advance(3600)
    assert clock() == dt.datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert clock().hour == 3  # wall time in Berlin skipped 02:xx


def test_frozen_clock_keeps_fold():
    late = dt.datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=BERLIN)
    clock = FrozenClock(late)
    assert clock().fold == 1 and clock().fold == 1
    assert clock().astimezone(UTC).hour == 1


def test_frozen_clock_refuses_naive_and_non_datetimes():
    with pytest.raises(ValueError, match="naive"):
        FrozenClock(dt.datetime(2026, 1, 1))
    clock = FrozenClock()
    with pytest.raises(ValueError, match="naive"):
        clock.set(dt.datetime(2026, 1, 1))
    with pytest.raises(TypeError):
        clock.set("2026-01-01")  # type: ignore[arg-type]


# --- FaultyJournal --------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
async def inner(request, tmp_path):
    clock = FrozenClock(tick=0.001)
    journal = (
        InMemoryJournal(clock=clock)
        if request.param == "memory"
        else SqliteJournal(tmp_path / "faulty.db", clock=clock)
    )
    yield journal
    await journal.close()


async def test_faulty_journal_is_a_journal(inner):
    assert isinstance(make_failing(inner), Journal)


async def test_fail_everything_writes_nothing(inner):
    journal = make_failing(inner)
    for i in range(3):
        with pytest.raises(JournalWriteError, match="injected"):
            await journal.append("s", Phase.INTENT, write_key=f"k{i}")
    assert await journal.entries("s") == [] and await inner.saga_ids() == []
    assert [a.number for a in journal.failures] == [1, 2, 3]


async def test_fail_by_phase(inner):
    journal = make_failing(inner, phase=Phase.INTENT)
    await journal.append("s", Phase.SAGA_OPENED, write_key="open")
    with pytest.raises(JournalWriteError):
        await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c")
    await journal.append("s", Phase.EXECUTED, write_key="e", tool="t", call_id="c")
    assert [e.phase for e in await journal.entries("s")] == [Phase.SAGA_OPENED, Phase.EXECUTED]
    failed = journal.failures[0]
    assert (failed.phase, failed.tool, failed.call_id, failed.write_key) == (Phase.INTENT, "t", "c", "i")


async def test_fail_by_phase_names_and_several_phases(inner):
    journal = make_failing(inner, phase=["EXECUTED", Phase.FAILED])
    await journal.append("s", Phase.INTENT, write_key="a")
    for phase in (Phase.EXECUTED, Phase.FAILED):
        with pytest.raises(JournalWriteError):
            await journal.append("s", phase, write_key=phase.value)
    assert len(await journal.entries("s")) == 1


async def test_fail_nth_tool_and_saga(inner):
    journal = make_failing(inner, nth=[2, 4], tool="charge", saga_id="s1")
    await journal.append("s1", Phase.INTENT, write_key="1", tool="charge")  # 1st: not nth
    with pytest.raises(JournalWriteError, match="#2"):
        await journal.append("s1", Phase.INTENT, write_key="2", tool="charge")
    await journal.append("s1", Phase.INTENT, write_key="3", tool="charge")
    await journal.append("s1", Phase.INTENT, write_key="4", tool="refund")  # 4th, other tool
    await journal.append("s2", Phase.INTENT, write_key="5", tool="charge")
    assert [e.write_key for e in await journal.entries("s1")] == ["1", "3", "4"]
    assert len(journal.attempts) == 5 and len(journal.failures) == 1


async def test_times_limits_failures_so_a_retry_succeeds(inner):
    journal = make_failing(inner, phase=Phase.EXECUTED, times=1)
    with pytest.raises(JournalWriteError):
        await journal.append("s", Phase.EXECUTED, write_key="out", payload={"r": 1})
    entry = await journal.append("s", Phase.EXECUTED, write_key="out", payload={"r": 1})
    assert entry.seq == 1


async def test_after_write_fault_then_retry_with_same_key_is_harmless(inner):
    """A commit whose acknowledgement was lost: the retry with the same write key returns the
    stored entry, never a second row (C-10 (a) on the embedded backends)."""
    journal = make_failing(inner, phase=Phase.EXECUTED, times=1, after_write=True)
    with pytest.raises(JournalWriteError):
        await journal.append("s", Phase.EXECUTED, write_key="out", tool="t", call_id="c", payload=1)
    (stored,) = await journal.entries("s")
    again = await journal.append("s", Phase.EXECUTED, write_key="out", tool="t", call_id="c", payload=1)
    assert again == stored and len(await journal.entries("s")) == 1


async def test_disarm_and_arm(inner):
    journal = make_failing(inner)
    journal.disarm()
    await journal.append("s", Phase.INTENT, write_key="a")
    journal.arm()
    with pytest.raises(JournalWriteError):
        await journal.append("s", Phase.INTENT, write_key="b")


async def test_custom_predicate_and_encoding_errors_pass_through(inner):
    journal = FaultyJournal(inner, when=lambda a: a.payload == "boom")
    with pytest.raises(EncodingError):
        await journal.append("s", Phase.INTENT, write_key="x", payload=object())
    with pytest.raises(JournalWriteError):
        await journal.append("s", Phase.INTENT, write_key="y", payload="boom")
    await journal.append("s", Phase.INTENT, write_key="z", payload="fine")
    assert [e.write_key for e in await journal.entries("s")] == ["z"]


async def test_nth_counts_concurrent_appends_exactly_once(inner):
    journal = make_failing(inner, nth=7)
    results = await asyncio.gather(
        *(journal.append("s", Phase.INTENT, write_key=f"k{i}") for i in range(20)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, JournalWriteError) for r in results) == 1
    assert sorted(a.number for a in journal.attempts) == list(range(1, 21))
    assert len(await journal.entries("s")) == 19


async def test_other_attributes_delegate(tmp_path):
    sqlite = SqliteJournal(tmp_path / "d.db")
    journal = make_failing(sqlite, nth=99)
    try:
        await journal.append("s", Phase.INTENT, write_key="k")
        assert journal.execute_sql("SELECT count(*) FROM sagacity_journal") == [(1,)]
        assert journal.path == sqlite.path
    finally:
        await journal.close()


def test_make_failing_validates():
    with pytest.raises(ValueError):
        make_failing(InMemoryJournal(), nth=0)
    with pytest.raises(ValueError):
        make_failing(InMemoryJournal(), phase="NOT_A_PHASE")
    with pytest.raises(ValueError):
        FaultyJournal(InMemoryJournal(), times=-1)


# --- under a saga ---------------------------------------------------------------------------

DECL = ToolDeclaration(name="charge", reversibility=Reversibility.NO_UNDO)


async def test_intent_write_fails_body_not_run(inner):
    """Fail closed: the INTENT cannot be written, so the tool body never runs; the reason is
    journaled because the journal is still reachable for other writes."""
    journal = make_failing(inner, phase=Phase.INTENT)
    saga = Saga(journal, "saga-intent")
    await saga.open()
    ran = False

    async def body() -> str:
        nonlocal ran
        ran = True
        return "charged"

    with pytest.raises(JournalWriteError):
        await saga.run_call(DECL, "charge", "call_1", {"amount": 1}, body)
    assert ran is False
    assert saga.failed
    entries = await inner.entries("saga-intent")
    assert [e.phase for e in entries] == [Phase.SAGA_OPENED, Phase.FAILED]
    assert entries[1].payload["not_run"] is True
    assert all(r.ok for r in await verify_journal(inner))


async def test_executed_write_fails_outcome_kept_and_written_later(inner):
    """The EXECUTED write fails: the result still reaches the caller, the outcome is held and
    a later settle() writes it (same write key)."""
    journal = make_failing(inner, phase=Phase.EXECUTED, times=1)
    saga = Saga(journal, "saga-exec", in_flight_timeout=5)
    await saga.open()

    async def body() -> dict[str, str]:
        return {"receipt": "r-1"}

    assert await saga.run_call(DECL, "charge", "call_1", {"amount": 1}, body) == {"receipt": "r-1"}
    assert [e.phase for e in await inner.entries("saga-exec")] == [Phase.SAGA_OPENED, Phase.INTENT]
    (held,) = saga.unwritten_outcomes
    assert held["phase"] == "EXECUTED" and held["payload"]["result"] == {"receipt": "r-1"}
    assert await saga.settle() == 0
    assert saga.unwritten_outcomes == []
    entries = await inner.entries("saga-exec")
    assert [e.phase for e in entries] == [Phase.SAGA_OPENED, Phase.INTENT, Phase.EXECUTED]
    assert entries[2].payload["result"] == {"receipt": "r-1"}
    assert all(r.ok for r in await verify_journal(inner))


async def test_executed_ack_lost_retry_does_not_duplicate(inner):
    journal = make_failing(inner, phase=Phase.EXECUTED, times=1, after_write=True)
    saga = Saga(journal, "saga-ack", in_flight_timeout=5)
    await saga.open()

    async def body() -> int:
        return 7

    assert await saga.run_call(DECL, "charge", "call_1", {"amount": 1}, body) == 7
    await saga.settle()
    phases = [e.phase for e in await inner.entries("saga-ack")]
    assert phases.count(Phase.EXECUTED) == 1
    assert saga.unwritten_outcomes == []
